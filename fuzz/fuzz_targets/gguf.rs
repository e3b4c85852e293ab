//! A GGUF file as the CLI opens one: the header, the model's config and tensor checks,
//! the tokenizer from its vocabulary, the chat template, and every tensor's bytes.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use sprout::model::gguf_model::GgufModel;
use sprout::model::names::TensorName;
use sprout::model::source::WeightSource;

fuzz_target!(|data: &[u8]| {
    let Ok(mut model) = GgufModel::from_reader(Cursor::new(data)) else {
        return;
    };
    let _ = model.tokenizer();
    let _ = model.chat_template();
    for name in TensorName::all(&model.config().clone()) {
        let _ = model.read(&name.to_string()).map(|t| t.to_f32());
    }
});
