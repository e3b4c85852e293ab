//! Chat templates are programs from model files and flags: the committed corpus of template
//! bombs (`tests/fixtures/template_bombs/`: repeats, ranges, joins, deep recursion, string
//! doubling, filters that multiply, huge output; and a huge source made here) each ends in an error
//! naming the bound it hit, with at most 100 MB live at once (a counting allocator measures
//! the process); real templates of the supported families render exactly as an unbounded
//! minijinja renders them, even for long chats; and a bomb inside a GGUF model ends a
//! rollout's line with the error, not the run's memory.

#[path = "header_mutations/counting_alloc.rs"]
mod counting_alloc;

use std::alloc::{GlobalAlloc, Layout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use sprout::formats::gguf::GgufValue;
use sprout::formats::gguf::writer::GgufWriter;
use sprout::tokenizer::chat_template::{ChatTemplate, Message, RenderOptions};
use sprout::tokenizer::template_functions;

/// The most a bomb may have live at once.
const MEMORY_CAP: usize = 100 << 20;
/// Past this the allocator refuses (the process aborts), so a bound that fails cannot take
/// the machine's memory before the test can say so.
const HARD_CAP: usize = 1 << 30;

/// The counting allocator, refusing what would pass [`HARD_CAP`].
struct Capped;

// SAFETY: forwards to `Counting` (which forwards to the system allocator) or refuses with
// null, as `GlobalAlloc` allows.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting_alloc::live() + layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        unsafe { counting_alloc::Counting.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { counting_alloc::Counting.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting_alloc::live() + new_size.saturating_sub(layout.size()) > HARD_CAP {
            return std::ptr::null_mut();
        }
        unsafe { counting_alloc::Counting.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

fn fixtures(dir: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    // Templates only (chat_templates/ holds renders.json beside them).
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|x| x == "jinja"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn chat(turns: usize, words: usize) -> Vec<Message> {
    (0..turns)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            Message::new(role, &format!("turn {i}: {}", "word ".repeat(words)))
        })
        .collect()
}

/// What a bomb's first line says it must end with: `{# expect: WORD #}`.
fn expected(source: &str) -> &str {
    source
        .strip_prefix("{# expect: ")
        .and_then(|rest| rest.split(" #}").next())
        .expect("a bomb starts with {# expect: WORD #}")
}

#[test]
fn every_bomb_ends_in_an_error_naming_its_bound_within_the_memory_cap() {
    let mut bombs = fixtures("template_bombs");
    assert!(bombs.len() >= 15, "the corpus has {} bombs", bombs.len());
    // And a source past the size sprout compiles, made here rather than committed.
    let huge = format!("{{# expect: bytes #}}{}", "x".repeat(300 << 10));
    bombs.push(("source_huge (made here)".into(), huge));
    let messages = chat(2, 3);
    for (name, source) in &bombs {
        let want = expected(source);
        let base = counting_alloc::mark();
        let started = Instant::now();
        let result = ChatTemplate::new(source, "<s>", "</s>").and_then(|t| t.render(&messages));
        let (seconds, peak) = (
            started.elapsed().as_secs_f64(),
            counting_alloc::peak_since(base),
        );
        let error = match result {
            Ok(text) => panic!("{name} rendered {} bytes instead of failing", text.len()),
            Err(e) => e.to_string(),
        };
        eprintln!(
            "{name}: {seconds:.3} s, peak {:.1} MB: {error}",
            peak as f64 / 1e6
        );
        assert!(
            error.contains(want),
            "{name}: the error does not name {want}: {error}"
        );
        assert!(peak < MEMORY_CAP, "{name}: {peak} bytes live at once");
    }
}

/// The date templates print (Llama 3.x's "Today Date"), fixed so both renders agree.
const DATE: &str = "26 Jul 2024";

/// The same template in minijinja with transformers' functions (sprout's
/// `template_functions`) but no bound of sprout's: what it renders unbounded.
fn unbounded(source: &str, messages: &[Message]) -> String {
    let mut env = minijinja::Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    template_functions::add_to(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_template("chat", source).unwrap();
    env.get_template("chat")
        .unwrap()
        .render(minijinja::context! {
            messages => minijinja::value::Serde(messages),
            add_generation_prompt => true,
            bos_token => "<s>",
            eos_token => "</s>",
            tools => (),
            documents => (),
            date_string => DATE,
        })
        .unwrap()
}

#[test]
fn real_templates_render_as_unbounded_minijinja_renders_them() {
    let templates = fixtures("chat_templates");
    assert!(templates.len() >= 4);
    // A short chat, and a long one (500 turns of about 2 KB: 1 MB, past any context).
    let mut options = RenderOptions::default();
    options.kwargs.insert("date_string".into(), DATE.into());
    for messages in [chat(2, 5), chat(500, 400)] {
        for (name, source) in &templates {
            let bounded = ChatTemplate::new(source, "<s>", "</s>")
                .and_then(|t| t.render_with(&messages, &options))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(bounded, unbounded(source, &messages), "{name}");
            assert!(bounded.contains("turn 1:"), "{name}: {bounded:.200}");
        }
    }
}

/// A GGUF model whose chat template is `template` (the tiny model's weights).
fn model_with_template(dir: &Path, template: &str) -> PathBuf {
    let path = dir.join("bomb.gguf");
    let bytes = GgufWriter::tiny_model("llama")
        .metadata(
            "tokenizer.chat_template",
            GgufValue::String(template.into()),
        )
        .to_bytes();
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_bomb_in_a_gguf_model_ends_its_prompt_with_the_error_and_the_run_goes_on() {
    let dir = std::env::temp_dir().join(format!("sprout-bomb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = model_with_template(&dir, "{{ ((1,) * 100000000) | length }}");
    let prompts = dir.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"ab\"}]}\n{\"prompt\": \"abc\"}\n",
    )
    .unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["rollout", "--model", model.to_str().unwrap()])
        .args(["--prompts", prompts.to_str().unwrap(), "--max-tokens", "2"])
        .output()
        .unwrap();
    let seconds = started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&dir).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("rollout with a bomb template: {seconds:.2} s\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("line 1") && stderr.contains("fuel"),
        "{stderr}"
    );
    // The text prompt still ran: one record.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}
