//! The prompts file's parser (`sprout::prompts`, as the CLI reads a file), and the chat
//! messages a line gives rendered with SmolLM2's template.
#![no_main]

use std::convert::Infallible;

use libfuzzer_sys::fuzz_target;
use sprout::prompts::{PromptInput, parse_lines};
use sprout::tokenizer::chat_template::ChatTemplate;

/// SmolLM2-Instruct's template (ChatML with a default system prompt).
const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let template = ChatTemplate::new(SMOLLM2, "", "<|im_end|>").expect("a valid template");
    let Ok(lines) = parse_lines(text.lines().map(|l| Ok::<_, Infallible>(l.to_string())));
    for parsed in lines.into_iter().flatten() {
        if let PromptInput::Messages(messages) = parsed.input {
            let _ = template.render(&messages);
        }
    }
});
