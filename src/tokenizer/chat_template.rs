//! Rendering chat messages into a prompt with the model's own Jinja chat template
//! (minijinja, with Python string methods that Hugging Face templates call).
//!
//! Every front end (the CLI's prompts files, the server's chat route, the web page's chat
//! mode) makes its template with [`ChatTemplate::for_model`] and its prompt with
//! [`ChatTemplate::prompt_ids`], so one set of messages becomes the same token ids
//! everywhere. A template is a program from a file or a server's flags: it renders within
//! sprout's bounds (`template_limits`) or ends in an error naming the bound it hit.
//!
//! A template renders in the environment transformers' `apply_chat_template` gives it
//! (`template_functions`: its `tojson`, `strftime_now`, whitespace control; `tools` and
//! `documents` none unless given), so its text is the one transformers and vLLM render.

use serde::{Deserialize, Serialize};

use crate::error::SproutError;
use crate::tokenizer::Tokenizer;
use crate::tokenizer::template_functions;
use crate::tokenizer::template_limits::{self, CappedOutput};

/// The token ids a template prints as `bos_token` and `eos_token`: a model's
/// beginning-of-sequence id and its first end-of-sequence id. `None` prints empty text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TemplateTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// One chat message (`{"role": "user", "content": "..."}`), with what tool-calling and
/// reasoning templates read besides. A field left `None` is absent for the template (as
/// a key missing from a Python dict), which templates test apart from an empty value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// The name of a tool result's function, or of a participant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant turn's calls: `[{"id", "type": "function", "function": {"name",
    /// "arguments": {...}}}]`, the arguments an object (as vLLM hands templates them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// Which call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant turn's reasoning, apart from its content (Qwen3's template prints it
    /// in a `<think>` block for the turns after the last user message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl Message {
    /// A message of `role` saying `content`, nothing else.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
            ..Message::default()
        }
    }
}

/// How to render a conversation besides its messages (Hugging Face's
/// `apply_chat_template` arguments, as vLLM's chat route takes them).
#[derive(Clone, Debug, PartialEq)]
pub struct RenderOptions {
    /// The tools' JSON schemas (`[{"type": "function", "function": {...}}]`), given to the
    /// template as `tools`; `None`: absent.
    pub tools: Option<serde_json::Value>,
    /// End with the assistant's turn opened (the default).
    pub add_generation_prompt: bool,
    /// End inside the last message instead (a prefill the model continues): rendered
    /// without the generation prompt, and cut right after that message's content (found
    /// as transformers finds it: by a tag appended to the content).
    pub continue_final_message: bool,
    /// More variables for the template (`chat_template_kwargs`: `enable_thinking`, ...).
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            tools: None,
            add_generation_prompt: true,
            continue_final_message: false,
            kwargs: serde_json::Map::new(),
        }
    }
}

/// The variables sprout sets; `kwargs` may not set them.
pub const RESERVED: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

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
        template_functions::add_to(&mut env);
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
        self.render_with(messages, &RenderOptions::default())
    }

    /// The token ids of the prompt for `messages` rendered with `options`.
    pub fn prompt_ids_with(
        &self,
        tokenizer: &Tokenizer,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<Vec<u32>, SproutError> {
        tokenizer.encode(&self.render_with(messages, options)?)
    }

    /// The prompt for `messages` rendered with `options` (see [`RenderOptions`]).
    pub fn render_with(
        &self,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<String, SproutError> {
        if options.continue_final_message && options.add_generation_prompt {
            return Err(SproutError::Model(
                "continue_final_message and add_generation_prompt cannot both be true".into(),
            ));
        }
        if let Some(name) = RESERVED.iter().find(|n| options.kwargs.contains_key(**n)) {
            return Err(SproutError::Model(format!(
                "chat_template_kwargs may not set {name}: it is set from the request"
            )));
        }
        if !options.continue_final_message {
            return self.render_context(messages, options);
        }
        let Some(last) = messages.last() else {
            return Err(SproutError::Model(
                "continue_final_message needs a final message to continue".into(),
            ));
        };
        let mut tagged = messages.to_vec();
        if let Some(final_message) = tagged.last_mut() {
            final_message.content.push_str(CONTINUE_TAG);
        }
        let rendered = self.render_context(&tagged, options)?;
        cut_at_tag(rendered, &last.content)
    }

    fn render_context(
        &self,
        messages: &[Message],
        options: &RenderOptions,
    ) -> Result<String, SproutError> {
        let template = self.env.get_template("chat").expect("added in new");
        let base = minijinja::context! {
            messages => minijinja::value::Serde(messages),
            add_generation_prompt => options.add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        // transformers passes both, none when not given: `tools is defined` holds.
        let tools = match &options.tools {
            Some(tools) => minijinja::context! { tools => minijinja::value::Serde(tools) },
            None => minijinja::context! { tools => () },
        };
        let tools = minijinja::context! { documents => (), ..tools };
        let kwargs = minijinja::Value::from(minijinja::value::Serde(&options.kwargs));
        let context = minijinja::context! { ..base, ..tools, ..kwargs };
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

/// What transformers appends to the final message's content to find where it ends in
/// the rendered text (`continue_final_message`).
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// `rendered` (the chat with [`CONTINUE_TAG`] after the final message's content
/// `content`) cut where the tag begins, as transformers cuts it: right there when the
/// template kept the tag's trailing space, else with the whitespace before it trimmed
/// too (the template trimmed the content).
fn cut_at_tag(rendered: String, content: &str) -> Result<String, SproutError> {
    let tag = CONTINUE_TAG.trim_end();
    let Some(at) = rendered
        .rfind(tag)
        .filter(|_| rendered.contains(content.trim()))
    else {
        return Err(SproutError::Model(
            "continue_final_message: the final message's content is not in the rendered \
             prompt (the template dropped or changed it), so it cannot be continued"
                .into(),
        ));
    };
    Ok(match rendered[at..].starts_with(CONTINUE_TAG) {
        true => rendered[..at].to_string(),
        false => rendered[..at].trim_end().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-Instruct's template (ChatML with a default system prompt).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn user(text: &str) -> Message {
        Message::new("user", text)
    }

    #[test]
    fn options_reach_the_template_and_bad_ones_are_refused() {
        let t = ChatTemplate::new(
            "{% if tools %}T{{ tools | length }}|{% endif %}{% if enable_thinking is defined %}\
             think={{ enable_thinking }}|{% endif %}{% for m in messages %}<{{ m.role }}>\
             {{ m.content }}</{{ m.role }}>{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}\
             {% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
            "",
            "",
        )
        .unwrap();
        let mut call = Message::new("assistant", "");
        call.tool_calls = Some(serde_json::json!([{"function": {"name": "add"}}]));
        let messages = [user("hi"), call, Message::new("assistant", "The sum is")];
        let mut options = RenderOptions {
            tools: Some(serde_json::json!([{}, {}])),
            ..RenderOptions::default()
        };
        options
            .kwargs
            .insert("enable_thinking".into(), serde_json::json!(false));
        let out = t.render_with(&messages, &options).unwrap();
        assert_eq!(
            out,
            "T2|think=False|<user>hi</user><assistant></assistant>add\
             <assistant>The sum is</assistant><assistant>"
        );
        // A prefill: the last message left open.
        options.add_generation_prompt = false;
        options.continue_final_message = true;
        let out = t.render_with(&messages, &options).unwrap();
        assert!(out.ends_with("<assistant>The sum is"), "{out}");
        options.add_generation_prompt = true;
        let both = t.render_with(&messages, &options).unwrap_err().to_string();
        assert!(both.contains("cannot both be true"), "{both}");
        let mut reserved = RenderOptions::default();
        reserved
            .kwargs
            .insert("messages".into(), serde_json::json!([]));
        let e = t.render_with(&messages, &reserved).unwrap_err().to_string();
        assert!(e.contains("may not set messages"), "{e}");
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
