//! Structure-aware mutations of a Hugging Face directory: the safetensors header's JSON
//! (ranges, shapes, dtypes, entries), its length prefix, the config's sizes, and the
//! file's length, each rewritten to values that tend to break a reader.

use serde_json::{Value, json};
use sprout::rng::SplitMix64;

/// A directory to open: config.json's text, the shard's header bytes (length prefix and
/// JSON), and the shard's length in all (the data after the header reads as zeros).
pub struct Mutant {
    pub config: String,
    pub head: Vec<u8>,
    pub len: u64,
    pub done: String,
}

/// The valid directory mutants are made from.
pub struct Base {
    config: Value,
    header: serde_json::Map<String, Value>,
    data_len: u64,
}

const CONFIG_FIELDS: [&str; 9] = [
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
];

const DTYPES: [&str; 10] = [
    "F32", "F16", "BF16", "I8", "U8", "F64", "BOOL", "F8_E4M3", "F4", "Q4",
];

impl Base {
    /// `config` is config.json's text; `shard` a whole safetensors file.
    pub fn new(config: &str, shard: &[u8]) -> Base {
        let n = u64::from_le_bytes(shard[..8].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&shard[8..8 + n]).unwrap();
        Base {
            config: serde_json::from_str(config).unwrap(),
            header: header.as_object().unwrap().clone(),
            data_len: (shard.len() - 8 - n) as u64,
        }
    }

    pub fn mutate(&self, rng: &mut SplitMix64) -> Mutant {
        let mut config = self.config.clone();
        let mut header = self.header.clone();
        let mut len_delta: i64 = 0;
        let mut prefix: Option<u64> = None;
        let mut text_edit: Option<(usize, u8)> = None;
        let mut truncate: Option<u64> = None;
        let mut done = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let names: Vec<String> = header
                .keys()
                .filter(|k| *k != "__metadata__")
                .cloned()
                .collect();
            if names.is_empty() {
                break;
            }
            let name = names[rng.below(names.len() as u64) as usize].clone();
            let other = names[rng.below(names.len() as u64) as usize].clone();
            match rng.below(11) {
                0 | 1 => {
                    let v = interesting(rng, header[&name]["data_offsets"][1].as_u64());
                    let i = rng.below(2) as usize;
                    header[&name]["data_offsets"][i] = json!(v);
                    done.push(format!("{name}.data_offsets[{i}] = {v}"));
                }
                2 => {
                    let theirs = header[&other]["data_offsets"].clone();
                    header[&name]["data_offsets"] = theirs.clone();
                    done.push(format!("{name}.data_offsets = {theirs} (of {other})"));
                }
                3 | 4 => {
                    let shape = header[&name]["shape"].as_array_mut().unwrap();
                    match rng.below(3) {
                        0 => shape.push(json!(interesting(rng, None))),
                        1 => drop(shape.pop()),
                        _ if !shape.is_empty() => {
                            let i = rng.below(shape.len() as u64) as usize;
                            shape[i] = json!(interesting(rng, shape[i].as_u64()));
                        }
                        _ => {}
                    }
                    done.push(format!("{name}.shape = {}", header[&name]["shape"]));
                }
                5 => {
                    let dtype = DTYPES[rng.below(DTYPES.len() as u64) as usize];
                    header[&name]["dtype"] = json!(dtype);
                    done.push(format!("{name}.dtype = {dtype}"));
                }
                6 => {
                    header.remove(&name);
                    done.push(format!("removed {name}"));
                }
                7 => {
                    let field = CONFIG_FIELDS[rng.below(CONFIG_FIELDS.len() as u64) as usize];
                    let v = interesting(rng, config[field].as_u64());
                    config[field] = match rng.below(8) {
                        0 => json!(-(v as i64)),
                        1 => json!(v.to_string()),
                        _ => json!(v),
                    };
                    done.push(format!("config {field} = {}", config[field]));
                }
                8 => {
                    let p = interesting(rng, None);
                    prefix = Some(p);
                    done.push(format!("header length = {p}"));
                }
                9 => {
                    len_delta = interesting(rng, None) as i64;
                    truncate = Some(rng.below(self.data_len + 64));
                    done.push(format!("file length {len_delta:+} or cut at {truncate:?}"));
                }
                _ => {
                    let at = rng.next_u64() as usize;
                    let byte = b"{}[],:\"0-e\\ "[rng.below(12) as usize];
                    text_edit = Some((at, byte));
                    done.push(format!("header byte {at} = {:?}", byte as char));
                }
            }
        }
        let mut json = serde_json::to_vec(&Value::Object(header)).unwrap();
        if let Some((at, byte)) = text_edit {
            let at = at % json.len();
            json[at] = byte;
        }
        let mut head = prefix.unwrap_or(json.len() as u64).to_le_bytes().to_vec();
        head.extend(&json);
        let mut len = head.len() as u64 + self.data_len;
        if let Some(cut) = truncate {
            len = match len_delta % 2 {
                0 => cut.min(len),
                _ => len.saturating_add_signed(len_delta % 4096),
            };
            head.truncate(len as usize);
        }
        Mutant {
            config: config.to_string(),
            head,
            len,
            done: done.join("; "),
        }
    }
}

/// A value that tends to break something: small numbers, powers of two and their
/// neighbours, the largest ones, or a neighbour of `old`.
fn interesting(rng: &mut SplitMix64, old: Option<u64>) -> u64 {
    match (rng.below(5), old) {
        (0, _) => rng.below(70),
        (1, _) => 1u64 << rng.below(64),
        (2, _) => (1u64 << rng.below(64)).wrapping_sub(1),
        (3, _) => [u64::MAX, u64::MAX / 2, u32::MAX as u64, 1 << 53][rng.below(4) as usize],
        (_, Some(old)) => old.wrapping_add(rng.below(9)).wrapping_sub(4),
        (_, None) => rng.below(1 << 20),
    }
}
