//! Structure-aware mutations of real headers: the default model's GGUF header
//! (tests/fixtures/smollm2-135m-q4_1.header.gguf) and the tiny-llama fixture's Hugging
//! Face directory. Every mutant must open or fail with an error, never panic, and never
//! make the readers hold more than [`CAP`] bytes at once (counted by this binary's global
//! allocator, which is why these tests are a target of their own).
//!
//! The GGUF fixture is the real file's header with its vocabulary cut to its first
//! [`KEPT_TOKENS`] tokens (and the merges among them) and no tensor data; the mutants are
//! opened as if the data were there (zeros), so they reach the config and tensor checks.
//! `make_gguf_header_fixture` (ignored) remakes it from the default model.

mod counting_alloc;
mod gguf_mutations;
mod padded;
mod safetensors_mutations;

use std::collections::HashSet;
use std::io::Cursor;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sprout::formats::gguf::writer::GgufWriter;
use sprout::formats::gguf::{GgufFile, GgufValue};
use sprout::model::gguf_model::GgufModel;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::source::WeightSource;
use sprout::rng::SplitMix64;
use sprout::tokenizer::chat_template::{ChatTemplate, Message};

use gguf_mutations::GgufLayout;
use padded::Padded;
use safetensors_mutations::Base;

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

/// The most bytes one mutant may make the readers hold at once.
const CAP: usize = 256 << 20;
/// Mutants of each header.
const MUTANTS: u64 = 10_000;
/// Tokens of the real vocabulary the GGUF fixture keeps.
const KEPT_TOKENS: usize = 1024;

/// The counters are global: one test measures at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn gguf_fixture() -> PathBuf {
    fixtures().join("smollm2-135m-q4_1.header.gguf")
}

/// Runs `open` on each of `MUTANTS` mutants from `mutant(rng)`; fails, naming the mutant,
/// on a panic or on more than `CAP` bytes live at once. Returns how many opened.
fn run_mutants<M>(
    seed: u64,
    mut mutant: impl FnMut(&mut SplitMix64) -> (M, String),
    open: impl Fn(&M) -> bool,
) -> u64 {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut rng = SplitMix64::new(seed);
    let (mut opened, mut most) = (0, 0);
    for i in 0..MUTANTS {
        let (m, done) = mutant(&mut rng);
        let base = counting_alloc::mark();
        let result = catch_unwind(AssertUnwindSafe(|| open(&m)));
        let peak = counting_alloc::peak_since(base);
        match result {
            Ok(ok) => opened += u64::from(ok),
            Err(_) => panic!("mutant {i} ({done}) panicked"),
        }
        assert!(peak <= CAP, "mutant {i} ({done}) held {peak} bytes at once");
        most = most.max(peak);
    }
    eprintln!("{opened} of {MUTANTS} mutants opened; the most held at once: {most} bytes");
    opened
}

/// Opens a GGUF mutant as the CLI would: the model, its tokenizer, its chat template.
fn open_gguf(bytes: &[u8], len: u64) -> bool {
    let Ok(model) = GgufModel::from_reader(Padded::new(bytes, len)) else {
        return false;
    };
    let _ = model.tokenizer();
    if let Some(source) = model.chat_template() {
        let hi = Message::new("user", "hi");
        let _ = ChatTemplate::new(source, "", "").and_then(|t| t.render(&[hi]));
    }
    true
}

#[test]
fn gguf_header_mutants_open_or_fail_cleanly() {
    let base = std::fs::read(gguf_fixture()).unwrap();
    // The file's length had its tensor data been kept: where the last tensor ends.
    let whole = GgufFile::from_reader(Padded::new(&base, u64::MAX / 2)).unwrap();
    let len = whole
        .tensors()
        .iter()
        .map(|t| whole.data_offset() + t.offset + t.byte_len().unwrap())
        .max()
        .unwrap();
    assert!(open_gguf(&base, len), "the fixture itself opens");
    let layout = GgufLayout::of(&base);
    let opened = run_mutants(
        18,
        |rng| layout.mutate(&base, rng),
        |bytes| open_gguf(bytes, len),
    );
    // Some mutants keep a usable file (a changed number, a flipped name byte): the
    // mutations are not all rejected at the first length.
    assert!(opened > 0 && opened < MUTANTS, "{opened} mutants opened");
}

#[test]
fn safetensors_directory_mutants_open_or_fail_cleanly() {
    let dir = fixtures().join("tiny-llama");
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let shard = std::fs::read(dir.join("model.safetensors")).unwrap();
    let base = Base::new(&config, &shard);
    let open = |m: &safetensors_mutations::Mutant| {
        let shards = vec![("model.safetensors".into(), Padded::new(&m.head, m.len))];
        let Ok(mut model) = SafetensorsDir::from_readers(&m.config, None, shards) else {
            return false;
        };
        let _ = model.read("layers.0.attn_norm");
        true
    };
    let opened = run_mutants(
        18,
        |rng| {
            let m = base.mutate(rng);
            let done = m.done.clone();
            (m, done)
        },
        open,
    );
    assert!(opened > 0 && opened < MUTANTS, "{opened} mutants opened");
}

/// Remakes the GGUF fixture from the default model: its metadata with the vocabulary cut
/// to the first `KEPT_TOKENS` tokens (and the merges whose parts and result they hold),
/// its tensor infos, and no tensor data.
#[test]
#[ignore = "remakes tests/fixtures/smollm2-135m-q4_1.header.gguf from the default model"]
fn make_gguf_header_fixture() {
    let path = sprout::model::default_model::path().unwrap();
    let mut file = GgufFile::open(&path).unwrap();
    let strings = |v: &GgufValue| -> Vec<String> {
        let items = v.as_array().unwrap();
        items
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut writer = GgufWriter::new();
    let meta = file.metadata().clone();
    let tokens = strings(meta.get("tokenizer.ggml.tokens").unwrap());
    let kept: HashSet<&str> = tokens[..KEPT_TOKENS].iter().map(String::as_str).collect();
    for (key, value) in meta.iter() {
        let value = match key {
            "tokenizer.ggml.tokens" | "tokenizer.ggml.token_type" => {
                GgufValue::Array(value.as_array().unwrap()[..KEPT_TOKENS].to_vec())
            }
            "tokenizer.ggml.merges" => GgufValue::Array(
                strings(value)
                    .into_iter()
                    .filter(|m| {
                        let (a, b) = m.split_once(' ').unwrap();
                        kept.contains(a) && kept.contains(b) && kept.contains(&*format!("{a}{b}"))
                    })
                    .map(GgufValue::String)
                    .collect(),
            ),
            _ => value.clone(),
        };
        writer = writer.metadata(key, value);
    }
    for info in file.tensors().to_vec() {
        let data = file.read_tensor(&info.name).unwrap();
        writer = writer.tensor(&info.name, &info.dims, info.ggml_type, data.bytes);
    }
    let bytes = writer.to_bytes();
    let header_len = GgufFile::from_reader(Cursor::new(&bytes[..]))
        .unwrap()
        .data_offset() as usize;
    std::fs::write(gguf_fixture(), &bytes[..header_len]).unwrap();
}
