//! PEFT's `adapter_config.json` for a LoRA adapter: what sprout reads, and what it
//! refuses by name because it would change the output in a way sprout does not compute.
//!
//! Every field of peft 0.21's `LoraConfig` (and its `PeftConfig` base) is decided:
//!
//! - read: `r` (default 8), `lora_alpha` (default 8), `use_rslora` (scale `alpha /
//!   sqrt(r)` rather than `alpha / r`), `target_modules` (a list, a regex string or
//!   `"all-linear"`), `exclude_modules`, `layers_to_transform`, `layers_pattern`,
//!   `rank_pattern`, `alpha_pattern` (matched as `model::lora::patterns` says);
//! - refused unless at their default, each a change of the forward pass or of what the
//!   adapter adds to: `peft_type` (LORA), `use_dora`, `bias` ("none"), `lora_bias`,
//!   `fan_in_fan_out`, `modules_to_save`, `trainable_token_indices`, `target_parameters`,
//!   `layer_replication`, `use_qalora`, `alora_invocation_tokens`, and the LoRA variants
//!   `velora_config`, `monteclora_config`, `use_bdlora`, `arrow_config`, `kasa_config`;
//! - `init_lora_weights`: an initialisation, so `true`, `false`, `"gaussian"`, `"eva"`,
//!   `"orthogonal"` and `"mica"` (whose forward is plain LoRA's) are read past; `"pissa"`
//!   (and `"pissa_niter_N"`), `"olora"`, `"corda"`, `"loftq"` and `"lora_ga"` rewrite the
//!   base weights when the adapter is made, so such an adapter is only right on that
//!   residual base and is refused (PEFT's `path_initial_model_for_weight_conversion`
//!   saves a plain LoRA adapter of the same model, which sprout reads);
//! - harmless, read past: `base_model_name_or_path`, `revision`, `task_type`,
//!   `inference_mode`, `peft_version`, `auto_mapping`, `lora_dropout` (none at inference),
//!   `runtime_config`, `ensure_weight_tying` (ties adapters of tied embeddings, which are
//!   refused anyway), `megatron_config`, `megatron_core` (how training shards the layers;
//!   the tensors' shapes are checked), `qalora_group_size` (only with `use_qalora`), and
//!   the initialisations' own settings `eva_config`, `corda_config`, `lora_ga_config`,
//!   `loftq_config`;
//! - a field sprout does not know (a later PEFT's) is read past when it is null, false
//!   or empty (how PEFT writes an option left off) and refused by name otherwise: sprout
//!   cannot tell whether it changes the output.
//!
//! PEFT's own consistency rules are kept: `layers_to_transform` and `layers_pattern` only
//! with a list of `target_modules`, and `layers_pattern` only with `layers_to_transform`.

use serde_json::{Map, Value};

use crate::model::lora::patterns::{
    Exclude, LayerFilter, ModuleSet, Pattern, PatternMap, Targeting,
};

/// The longest piece of a value an error message quotes.
const QUOTE_CHARS: usize = 80;

/// What sprout takes from `adapter_config.json`.
#[derive(Clone, Debug)]
pub struct PeftConfig {
    pub r: usize,
    pub lora_alpha: f64,
    pub use_rslora: bool,
    pub targeting: Targeting,
    pub rank_pattern: PatternMap<usize>,
    pub alpha_pattern: PatternMap<f64>,
}

impl PeftConfig {
    /// The config from the file's bytes; an error (without the file's name, which the
    /// caller adds) names the field and its value.
    pub fn parse(json: &[u8]) -> Result<PeftConfig, String> {
        let value: Value =
            serde_json::from_slice(json).map_err(|e| format!("not valid JSON: {e}"))?;
        let Value::Object(fields) = value else {
            return Err(format!("is {}, not a JSON object", quote(&value)));
        };
        for (name, value) in &fields {
            check_field(name, value)?;
        }
        let get = |name: &str| fields.get(name).filter(|v| !v.is_null());
        let r = match get("r") {
            None => 8,
            Some(v) => rank("r", v)?,
        };
        let lora_alpha = match get("lora_alpha") {
            None => 8.0,
            Some(v) => alpha("lora_alpha", v)?,
        };
        let use_rslora = match get("use_rslora") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("use_rslora is {}, not true or false", quote(v)))?,
        };
        let targeting = targeting(&fields)?;
        let rank_pattern = pattern_map(&fields, "rank_pattern", rank)?;
        let alpha_pattern = pattern_map(&fields, "alpha_pattern", alpha)?;
        Ok(PeftConfig {
            r,
            lora_alpha,
            use_rslora,
            targeting,
            rank_pattern,
            alpha_pattern,
        })
    }

    /// The rank of module `name` (`rank_pattern`'s, or `r`).
    pub fn rank_of(&self, name: &str) -> usize {
        self.rank_pattern.lookup(name).unwrap_or(self.r)
    }

    /// What B's product is multiplied by for module `name`, as PEFT computes it in
    /// Python floats: `alpha / r`, or `alpha / sqrt(r)` with rsLoRA.
    pub fn scale_of(&self, name: &str) -> f64 {
        let alpha = self.alpha_pattern.lookup(name).unwrap_or(self.lora_alpha);
        let r = self.rank_of(name) as f64;
        match self.use_rslora {
            true => alpha / r.sqrt(),
            false => alpha / r,
        }
    }
}

/// Whether `value` is how PEFT writes an option left off: null, false, "" or empty.
fn is_off(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `value` as JSON text, cut short.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

/// Fields read elsewhere in [`PeftConfig::parse`].
const READ: [&str; 9] = [
    "r",
    "lora_alpha",
    "use_rslora",
    "target_modules",
    "exclude_modules",
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
];

/// Fields that change nothing sprout computes.
const HARMLESS: [&str; 16] = [
    "base_model_name_or_path",
    "revision",
    "task_type",
    "inference_mode",
    "peft_version",
    "auto_mapping",
    "lora_dropout",
    "runtime_config",
    "ensure_weight_tying",
    "megatron_config",
    "megatron_core",
    "qalora_group_size",
    "eva_config",
    "corda_config",
    "lora_ga_config",
    "loftq_config",
];

/// Fields refused unless off, each with what it would change.
const REFUSED_UNLESS_OFF: [(&str, &str); 14] = [
    (
        "use_dora",
        "DoRA rescales each output row by a learned magnitude over the norm of the merged \
         weight, which is not plain LoRA (merge the adapter into the weights instead)",
    ),
    (
        "lora_bias",
        "a bias on LoRA's B adds to the projection's output, which sprout does not compute",
    ),
    (
        "fan_in_fan_out",
        "transposed weights are for GPT-2's Conv1D layers; sprout's models have none",
    ),
    (
        "modules_to_save",
        "whole modules trained beside the adapter replace the base's, which sprout cannot \
         do per adapter",
    ),
    (
        "trainable_token_indices",
        "trained embedding rows replace the base's, which sprout cannot do per adapter",
    ),
    (
        "target_parameters",
        "adapters on parameters rather than linear modules (mixture-of-experts weights) \
         are not supported",
    ),
    (
        "layer_replication",
        "repeating the base's layers makes another model than the one sprout serves",
    ),
    (
        "use_qalora",
        "QA-LoRA pools the input in groups before A, which sprout does not compute",
    ),
    (
        "alora_invocation_tokens",
        "activated LoRA applies only after its invocation tokens, which sprout does not \
         track",
    ),
    ("velora_config", "LoRA variants are not supported"),
    ("monteclora_config", "LoRA variants are not supported"),
    ("use_bdlora", "LoRA variants are not supported"),
    ("arrow_config", "LoRA variants are not supported"),
    (
        "kasa_config",
        "KaSA (a learned diagonal between A and B, on a truncated base) is a LoRA variant \
         sprout does not support",
    ),
];

/// Checks one top-level field against the decisions of the module doc.
fn check_field(name: &str, value: &Value) -> Result<(), String> {
    if READ.contains(&name) || HARMLESS.contains(&name) {
        return Ok(());
    }
    if let Some((_, why)) = REFUSED_UNLESS_OFF.iter().find(|(n, _)| *n == name) {
        return match is_off(value) {
            true => Ok(()),
            false => Err(format!("{name} is {}: {why}", quote(value))),
        };
    }
    match name {
        "peft_type" => match value.as_str() {
            Some("LORA") => Ok(()),
            _ => Err(format!(
                "peft_type is {}: sprout reads LORA adapters only",
                quote(value)
            )),
        },
        "bias" => match value.as_str() {
            Some("none") => Ok(()),
            None if value.is_null() => Ok(()),
            _ => Err(format!(
                "bias is {}: trained biases of the base's layers are not supported (only \
                 \"none\")",
                quote(value)
            )),
        },
        "init_lora_weights" => check_init(value),
        _ if is_off(value) => Ok(()),
        _ => Err(format!(
            "{name} is {}, a field sprout does not know (it reads peft 0.21's LoraConfig) \
             and so cannot tell whether it changes the output",
            quote(value)
        )),
    }
}

/// `init_lora_weights`: an initialisation is harmless unless it rewrote the base weights.
fn check_init(value: &Value) -> Result<(), String> {
    let Some(init) = value.as_str() else {
        return match value {
            Value::Bool(_) | Value::Null => Ok(()),
            _ => Err(format!(
                "init_lora_weights is {}, not a boolean or a method's name",
                quote(value)
            )),
        };
    };
    match init {
        "gaussian" | "eva" | "orthogonal" | "mica" => Ok(()),
        "olora" | "corda" | "loftq" | "lora_ga" | "pissa" => Err(residual(init)),
        _ if init.starts_with("pissa_niter_") => Err(residual(init)),
        _ => Err(format!(
            "init_lora_weights is \"{init}\", an initialisation sprout does not know"
        )),
    }
}

fn residual(init: &str) -> String {
    format!(
        "init_lora_weights is \"{init}\": that initialisation rewrote the base weights, so \
         the adapter is only right on that residual base model (save it with PEFT's \
         path_initial_model_for_weight_conversion for a plain LoRA adapter of the original)"
    )
}

/// A rank: a positive integer.
fn rank(field: &str, v: &Value) -> Result<usize, String> {
    match v.as_u64().and_then(|r| usize::try_from(r).ok()) {
        Some(r) if r > 0 => Ok(r),
        _ => Err(format!("{field} is {}, not a positive integer", quote(v))),
    }
}

/// An alpha: a finite number.
fn alpha(field: &str, v: &Value) -> Result<f64, String> {
    match v.as_f64() {
        Some(a) if a.is_finite() => Ok(a),
        _ => Err(format!("{field} is {}, not a finite number", quote(v))),
    }
}

/// A list of strings.
fn strings(field: &str, list: &[Value]) -> Result<Vec<String>, String> {
    list.iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{field} holds {}, not a module name", quote(v)))
        })
        .collect()
}

fn targeting(fields: &Map<String, Value>) -> Result<Targeting, String> {
    let get = |name: &str| fields.get(name).filter(|v| !v.is_null());
    let target_modules = match get("target_modules") {
        None => {
            return Err(
                "target_modules is missing or null: PEFT picks a default list for \
                        the model when it trains and writes the list it chose; sprout needs \
                        that list"
                    .into(),
            );
        }
        Some(Value::String(s)) if s.eq_ignore_ascii_case("all-linear") => ModuleSet::AllLinear,
        Some(Value::String(s)) => ModuleSet::Regex(Pattern::whole("target_modules", s)?),
        Some(Value::Array(list)) => ModuleSet::Names(strings("target_modules", list)?),
        Some(v) => {
            return Err(format!(
                "target_modules is {}, not a list of names or a regular expression",
                quote(v)
            ));
        }
    };
    let exclude_modules = match get("exclude_modules") {
        None => None,
        Some(Value::String(s)) => Some(Exclude::Regex(Pattern::whole("exclude_modules", s)?)),
        Some(Value::Array(list)) => Some(Exclude::Names(strings("exclude_modules", list)?)),
        Some(v) => {
            return Err(format!(
                "exclude_modules is {}, not a list of names or a regular expression",
                quote(v)
            ));
        }
    };
    let layers = match get("layers_to_transform") {
        None => None,
        Some(Value::Array(list)) if list.is_empty() => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(|v| layer_index(v, "holds"))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(v) => Some(vec![layer_index(v, "is")?]),
    };
    let patterns = match get("layers_pattern") {
        None => vec![],
        Some(Value::String(s)) if s.is_empty() => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => strings("layers_pattern", list)?,
        Some(v) => {
            return Err(format!(
                "layers_pattern is {}, not a name or a list of names",
                quote(v)
            ));
        }
    };
    // PEFT's own rules (LoraConfig.__post_init__), so sprout reads what PEFT would load.
    let string_targets = !matches!(target_modules, ModuleSet::Names(_));
    if string_targets && get("layers_to_transform").is_some() {
        return Err(
            "layers_to_transform is set, but target_modules is a string (PEFT \
                    refuses the two together)"
                .into(),
        );
    }
    if string_targets && get("layers_pattern").is_some() {
        return Err(
            "layers_pattern is set, but target_modules is a string (PEFT refuses \
                    the two together)"
                .into(),
        );
    }
    if !patterns.is_empty() && get("layers_to_transform").is_none() {
        return Err("layers_pattern is set without layers_to_transform (PEFT refuses it)".into());
    }
    let patterns = patterns
        .iter()
        .map(|p| Pattern::layers("layers_pattern", p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Targeting {
        target_modules,
        exclude_modules,
        layer_filter: LayerFilter::new(layers, patterns),
    })
}

fn layer_index(v: &Value, verb: &str) -> Result<usize, String> {
    v.as_u64()
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| format!("layers_to_transform {verb} {}, not a layer index", quote(v)))
}

/// `rank_pattern` or `alpha_pattern`: an object of pattern keys and values, in order.
fn pattern_map<T>(
    fields: &Map<String, Value>,
    field: &str,
    value: fn(&str, &Value) -> Result<T, String>,
) -> Result<PatternMap<T>, String> {
    let entries = match fields.get(field) {
        None | Some(Value::Null) => vec![],
        Some(Value::Object(map)) => map
            .iter()
            .map(|(key, v)| {
                let what = format!("{field}[\"{key}\"]");
                Ok((Pattern::key(field, key)?, value(&what, v)?))
            })
            .collect::<Result<Vec<_>, String>>()?,
        Some(v) => {
            return Err(format!(
                "{field} is {}, not an object of patterns and values",
                quote(v)
            ));
        }
    };
    Ok(PatternMap { entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A config PEFT 0.21 writes for `LoraConfig(r=8, lora_alpha=16, target_modules=[..])`.
    fn written() -> Value {
        json!({
            "alora_invocation_tokens": null, "alpha_pattern": {}, "arrow_config": null,
            "auto_mapping": null, "base_model_name_or_path": "tiny-llama", "bias": "none",
            "corda_config": null, "ensure_weight_tying": false, "eva_config": null,
            "exclude_modules": null, "fan_in_fan_out": false, "inference_mode": true,
            "init_lora_weights": true, "kasa_config": null, "layer_replication": null,
            "layers_pattern": null, "layers_to_transform": null, "loftq_config": {},
            "lora_alpha": 16, "lora_bias": false, "lora_dropout": 0.05,
            "lora_ga_config": null, "megatron_config": null,
            "megatron_core": "megatron.core", "modules_to_save": null,
            "monteclora_config": null, "peft_type": "LORA", "peft_version": "0.21.2",
            "qalora_group_size": 16, "r": 8, "rank_pattern": {}, "revision": null,
            "target_modules": ["v_proj", "q_proj"], "target_parameters": null,
            "task_type": "CAUSAL_LM", "trainable_token_indices": null, "use_bdlora": null,
            "use_dora": false, "use_qalora": false, "use_rslora": false,
            "velora_config": null
        })
    }

    fn with(field: &str, value: Value) -> Value {
        let mut c = written();
        c[field] = value;
        c
    }

    fn parse(v: &Value) -> Result<PeftConfig, String> {
        PeftConfig::parse(v.to_string().as_bytes())
    }

    const Q0: &str = "model.layers.0.self_attn.q_proj";
    const K0: &str = "model.layers.0.self_attn.k_proj";
    const UP1: &str = "model.layers.1.mlp.up_proj";

    #[test]
    fn what_peft_writes_is_read() {
        let c = parse(&written()).unwrap();
        assert_eq!((c.r, c.lora_alpha, c.use_rslora), (8, 16.0, false));
        assert!(c.targeting.targets(Q0, true) && !c.targeting.targets(K0, true));
        assert_eq!(c.rank_of(Q0), 8);
        assert_eq!(c.scale_of(Q0), 2.0);
        let c = parse(&with("use_rslora", json!(true))).unwrap();
        assert_eq!(c.scale_of(Q0), 16.0 / 8f64.sqrt());
        // PEFT's defaults for r and lora_alpha.
        let mut v = written();
        v.as_object_mut().unwrap().remove("r");
        v.as_object_mut().unwrap().remove("lora_alpha");
        assert_eq!(parse(&v).unwrap().scale_of(Q0), 1.0);
    }

    #[test]
    fn rank_and_alpha_patterns_override_per_module() {
        let mut v = with("rank_pattern", json!({"q_proj": 4, r"layers\.1\..*": 16}));
        v["alpha_pattern"] = json!({"up_proj": 2.5});
        v["target_modules"] = json!("all-linear");
        let c = parse(&v).unwrap();
        assert_eq!((c.rank_of(Q0), c.rank_of(K0), c.rank_of(UP1)), (4, 8, 16));
        assert_eq!(c.scale_of(Q0), 16.0 / 4.0);
        assert_eq!(c.scale_of(UP1), 2.5 / 16.0);
        assert!(c.targeting.targets(K0, true));
    }

    #[test]
    fn layers_to_transform_takes_an_int_or_a_list() {
        let c = parse(&with("layers_to_transform", json!(1))).unwrap();
        assert!(!c.targeting.targets(Q0, true));
        assert!(c.targeting.targets("model.layers.1.self_attn.v_proj", true));
        let c = parse(&with("layers_to_transform", json!([0, 2]))).unwrap();
        assert!(c.targeting.targets(Q0, true));
        let mut v = with("layers_to_transform", json!([1]));
        v["layers_pattern"] = json!("layers");
        let c = parse(&v).unwrap();
        assert!(!c.targeting.targets(Q0, true));
        assert!(c.targeting.targets("model.layers.1.self_attn.q_proj", true));
    }

    #[test]
    fn each_refusal_names_its_field_and_value() {
        let cases = [
            ("use_dora", json!(true), "DoRA"),
            ("bias", json!("all"), "\"all\""),
            ("bias", json!("lora_only"), "lora_only"),
            ("lora_bias", json!(true), "true"),
            ("fan_in_fan_out", json!(true), "Conv1D"),
            ("modules_to_save", json!(["lm_head"]), "lm_head"),
            ("trainable_token_indices", json!([1, 2]), "[1,2]"),
            (
                "target_parameters",
                json!(["experts.gate_up_proj"]),
                "experts",
            ),
            (
                "layer_replication",
                json!([[0, 2], [1, 2]]),
                "[[0,2],[1,2]]",
            ),
            ("use_qalora", json!(true), "true"),
            ("alora_invocation_tokens", json!([5]), "[5]"),
            ("velora_config", json!({"rank": 2}), "variants"),
            ("kasa_config", json!({"beta": 1}), "KaSA"),
            ("peft_type", json!("LOHA"), "\"LOHA\""),
            ("init_lora_weights", json!("pissa"), "residual"),
            ("init_lora_weights", json!("pissa_niter_4"), "pissa_niter_4"),
            ("init_lora_weights", json!("loftq"), "loftq"),
            ("init_lora_weights", json!("lora_ga"), "lora_ga"),
            ("init_lora_weights", json!("olora"), "olora"),
            ("init_lora_weights", json!("sideways"), "sideways"),
            ("r", json!(0), "0"),
            ("r", json!(-4), "-4"),
            ("r", json!(8.5), "8.5"),
            ("r", json!("8"), "\"8\""),
            ("lora_alpha", json!("16"), "\"16\""),
            ("use_rslora", json!("yes"), "\"yes\""),
            ("target_modules", json!(null), "default"),
            ("target_modules", json!(7), "7"),
            ("target_modules", json!(["q_proj", 3]), "3"),
            (
                "target_modules",
                json!("(?<=self_attn\\.)q_proj"),
                "(?<=self_attn",
            ),
            ("exclude_modules", json!(5), "5"),
            ("layers_to_transform", json!(-1), "-1"),
            ("layers_to_transform", json!([0, "1"]), "\"1\""),
            (
                "layers_pattern",
                json!("layers"),
                "without layers_to_transform",
            ),
            (
                "rank_pattern",
                json!({"q_proj": 0}),
                "rank_pattern[\"q_proj\"] is 0",
            ),
            ("rank_pattern", json!([4]), "[4]"),
            ("alpha_pattern", json!({"q_proj": "big"}), "\"big\""),
            ("a_future_option", json!({"on": true}), "does not know"),
        ];
        for (field, value, says) in cases {
            let e = parse(&with(field, value.clone())).unwrap_err();
            assert!(
                e.contains(field) && e.contains(says),
                "{field} = {value}: {e}"
            );
        }
        // A regex target may not be narrowed by layers, as in PEFT.
        let mut v = with("target_modules", json!(".*q_proj"));
        v["layers_to_transform"] = json!([0]);
        let e = parse(&v).unwrap_err();
        assert!(
            e.contains("layers_to_transform") && e.contains("string"),
            "{e}"
        );
        assert!(
            PeftConfig::parse(b"{\"r\": 8,")
                .unwrap_err()
                .contains("JSON")
        );
        assert!(PeftConfig::parse(b"[1]").unwrap_err().contains("object"));
    }

    #[test]
    fn harmless_and_unknown_empty_fields_are_read_past() {
        for (field, value) in [
            ("init_lora_weights", json!(false)),
            ("init_lora_weights", json!("gaussian")),
            ("init_lora_weights", json!("eva")),
            ("eva_config", json!({"rho": 2.0})),
            ("lora_dropout", json!(0.3)),
            ("task_type", json!("SEQ_2_SEQ_LM")),
            ("bias", json!(null)),
            ("a_future_option", json!(null)),
            ("a_future_list", json!([])),
            ("use_future_variant", json!(false)),
        ] {
            assert!(
                parse(&with(field, value.clone())).is_ok(),
                "{field} = {value}"
            );
        }
    }

    #[test]
    fn long_values_are_quoted_short() {
        let long = "x".repeat(10_000);
        let e = parse(&with("peft_type", json!(long))).unwrap_err();
        assert!(e.len() < 300 && e.contains("..."), "{e}");
    }
}
