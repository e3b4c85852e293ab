//! A Hugging Face directory: `config.json`, then a NUL byte, then one `model.safetensors`
//! (a second NUL splits off a `generation_config.json` before the shard); every tensor of
//! a directory that opens is read.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use sprout::model::names::TensorName;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let Some(Ok(config)) = parts.next().map(std::str::from_utf8) else {
        return;
    };
    let (generation, shard) = match (parts.next(), parts.next()) {
        (Some(g), Some(s)) => (std::str::from_utf8(g).ok(), s),
        (Some(s), None) => (None, s),
        _ => return,
    };
    let shards = vec![("model.safetensors".to_string(), Cursor::new(shard))];
    let Ok(mut model) = SafetensorsDir::from_readers(config, generation, shards) else {
        return;
    };
    for name in TensorName::all(&model.config().clone()) {
        let _ = model.read(&name.to_string()).map(|t| t.to_f32());
    }
});
