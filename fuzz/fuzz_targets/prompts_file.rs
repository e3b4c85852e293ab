//! The prompts file's line parser (the CLI's own module, included as it is), and the
//! chat messages a line gives rendered with SmolLM2's template.
#![no_main]

#[allow(dead_code)]
#[path = "../../src/cli/prompts_file.rs"]
mod prompts_file;

use libfuzzer_sys::fuzz_target;
use prompts_file::{PromptInput, parse_line};
use sprout::tokenizer::chat_template::ChatTemplate;

/// SmolLM2-Instruct's template (ChatML with a default system prompt).
const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let template = ChatTemplate::new(SMOLLM2, "", "<|im_end|>").expect("a valid template");
    for (i, line) in text.lines().enumerate() {
        if let Ok(parsed) = parse_line(i + 1, line)
            && let PromptInput::Messages(messages) = parsed.input
        {
            let _ = template.render(&messages);
        }
    }
});
