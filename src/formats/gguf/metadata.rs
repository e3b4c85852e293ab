//! GGUF metadata values and the key-value map they come in. Typed getters distinguish an
//! absent key (`Ok(None)`) from one holding another type (an error naming the key), so
//! config code can give defaults without hiding a corrupt file.

use std::collections::BTreeMap;

use crate::error::SproutError;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::F32(_) => "f32",
            GgufValue::Bool(_) => "bool",
            GgufValue::String(_) => "string",
            GgufValue::Array(_) => "array",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F64(_) => "f64",
        }
    }

    /// Any integer value that is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// Any numeric value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// The metadata of a GGUF file, by key. Typed getters return `Ok(None)` for an absent key
/// and an error naming the key when it holds another type.
#[derive(Clone, Debug, Default)]
pub struct GgufMetadata {
    entries: BTreeMap<String, GgufValue>,
}

impl GgufMetadata {
    /// Sets `key`, returning the value it replaces.
    pub fn insert(&mut self, key: impl Into<String>, value: GgufValue) -> Option<GgufValue> {
        self.entries.insert(key.into(), value)
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.entries.get(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        want: &str,
        get: impl FnOnce(&'a GgufValue) -> Option<T>,
    ) -> Result<Option<T>, SproutError> {
        match self.entries.get(key) {
            None => Ok(None),
            Some(v) => get(v).map(Some).ok_or_else(|| {
                SproutError::Model(format!(
                    "GGUF metadata `{key}` is a {} where {want} was expected",
                    v.type_name()
                ))
            }),
        }
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>, SproutError> {
        self.typed(key, "a non-negative integer", GgufValue::as_u64)
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>, SproutError> {
        self.typed(key, "a number", GgufValue::as_f64)
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, SproutError> {
        self.typed(key, "a bool", GgufValue::as_bool)
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>, SproutError> {
        self.typed(key, "a string", GgufValue::as_str)
    }

    pub fn array(&self, key: &str) -> Result<Option<&[GgufValue]>, SproutError> {
        self.typed(key, "an array", GgufValue::as_array)
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<&str>>, SproutError> {
        self.typed(key, "an array of strings", |v| {
            v.as_array()?.iter().map(GgufValue::as_str).collect()
        })
    }

    /// An array of integers.
    pub fn integers(&self, key: &str) -> Result<Option<Vec<i64>>, SproutError> {
        self.typed(key, "an array of integers", |v| {
            v.as_array()?.iter().map(GgufValue::as_i64).collect()
        })
    }

    /// A non-negative integer that must be present.
    pub fn require_u64(&self, key: &str) -> Result<u64, SproutError> {
        self.u64(key)?
            .ok_or_else(|| SproutError::Model(format!("GGUF metadata has no `{key}`")))
    }
}
