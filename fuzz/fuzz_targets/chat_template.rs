//! A chat template as a model file ships it, rendered: the template's source, then a NUL
//! byte, then one message per line (`role: content`; a line without `: ` is a user's).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (source, messages) = text.split_once('\0').unwrap_or((text, "hi"));
    let messages: Vec<Message> = messages
        .lines()
        .map(|line| {
            let (role, content) = line.split_once(": ").unwrap_or(("user", line));
            Message {
                role: role.into(),
                content: content.into(),
            }
        })
        .collect();
    if let Ok(template) = ChatTemplate::new(source, "<s>", "</s>") {
        let _ = template.render(&messages);
    }
});
