//! Rendering chat messages into a prompt with the model's own Jinja chat template
//! (minijinja, with Python string methods that Hugging Face templates call).
//!
//! Every front end (the CLI's prompts files, the server's chat route, the web page's chat
//! mode) makes its template with [`ChatTemplate::for_model`] and its prompt with
//! [`ChatTemplate::prompt_ids`], so one set of messages becomes the same token ids
//! everywhere. A template is a program from a file or a server's flags: it renders within
//! sprout's bounds (`template_limits`) or ends in an error naming the bound it hit.

use serde::{Deserialize, Serialize};

use crate::error::SproutError;
use crate::tokenizer::Tokenizer;
use crate::tokenizer::template_limits::{self, CappedOutput};

/// The token ids a template prints as `bos_token` and `eos_token`: a model's
/// beginning-of-sequence id and its first end-of-sequence id. `None` prints empty text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TemplateTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// One chat message (`{"role": "user", "content": "..."}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// A model's chat template, ready to render.
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` and `eos_token` are the texts templates may print.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, SproutError> {
        template_limits::check_source(source).map_err(SproutError::Model)?;
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", |msg: String| -> Result<String, _> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        });
        template_limits::bound(&mut env);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| SproutError::Model(format!("the model's chat template: {e}")))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// A model's template `source`, printing the texts of the model's own `tokens` as
    /// `bos_token` and `eos_token`.
    pub fn for_model(
        source: &str,
        tokenizer: &Tokenizer,
        tokens: TemplateTokens,
    ) -> Result<Self, SproutError> {
        let text = |id: Option<u32>| -> Result<String, SproutError> {
            Ok(match id {
                Some(id) => tokenizer.decode_with(&[id], false)?,
                None => String::new(),
            })
        };
        let (bos, eos) = (text(tokens.bos)?, text(tokens.eos)?);
        ChatTemplate::new(source, &bos, &eos)
    }

    /// The token ids of the prompt for `messages`: the rendered text, encoded with its
    /// special tokens recognised (as `sprout rollout --prompt` encodes text).
    pub fn prompt_ids(
        &self,
        tokenizer: &Tokenizer,
        messages: &[Message],
    ) -> Result<Vec<u32>, SproutError> {
        tokenizer.encode(&self.render(messages)?)
    }

    /// The prompt for `messages`, ending with the assistant's turn opened.
    pub fn render(&self, messages: &[Message]) -> Result<String, SproutError> {
        let template = self.env.get_template("chat").expect("added in new");
        let context = minijinja::context! {
            messages => minijinja::value::Serde(messages),
            add_generation_prompt => true,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let mut out = CappedOutput::default();
        if let Err(e) = template.render_captured_to(context, &mut out) {
            let why = template_limits::describe(&e, out.overflowed);
            return Err(SproutError::Model(format!(
                "rendering the chat template: {why}"
            )));
        }
        String::from_utf8(out.bytes).map_err(|_| {
            SproutError::Model("rendering the chat template: its output is not UTF-8".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (ChatML with a default system prompt).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn user(text: &str) -> Message {
        Message {
            role: "user".into(),
            content: text.into(),
        }
    }

    /// Found by fuzzing: a template that repeats an empty tuple 5e10 times ran for as
    /// many steps under minijinja 2; a repeat is now bounded by its length.
    #[test]
    fn huge_repeats_of_sequences_end_at_once() {
        let t = ChatTemplate::new("{{9*(50000000000*() ) }}", "", "").unwrap();
        t.render(&[user("hi")]).unwrap();
        let t = ChatTemplate::new("{{ [1] * 50000000000 }}", "", "").unwrap();
        let err = t.render(&[user("hi")]).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn renders_chatml_with_the_generation_prompt() {
        let t = ChatTemplate::new(SMOLLM2, "", "<|im_end|>").unwrap();
        let got = t.render(&[user("Hi")]).unwrap();
        assert_eq!(
            got,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
             Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let src = "{% if messages|length == 0 %}{{ raise_exception('no messages') }}{% endif %}\
                   {% for m in messages %}{{ m['content'].strip() }}{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(t.render(&[user("  padded  ")]).unwrap(), "padded");
        let err = t.render(&[]).unwrap_err().to_string();
        assert!(err.contains("no messages"), "{err}");
    }

    #[test]
    fn a_broken_template_is_an_error_naming_it() {
        let err = ChatTemplate::new("{% for %}", "", "").err().unwrap();
        assert!(err.to_string().contains("chat template"), "{err}");
    }
}
