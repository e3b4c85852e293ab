//! Reading one field of a JSON body: the two readers every route's parser shares, each
//! noting the field as read (the field table's test checks the parsers read exactly the
//! fields it says they implement).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::cli::serve::error::{ApiError, short};
use crate::cli::serve::fields::note_read;

/// The value of field `name` of `obj` as a `T`, `None` when absent or null; `what` says
/// what the field must be, in the error.
pub(super) fn field<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<T>, ApiError> {
    match get(obj, name) {
        None => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|_| ApiError::bad(name, format!("{name} must be {what}, not {}", short(v)))),
    }
}

/// Field `name` of `obj`, `None` when absent or null.
pub(super) fn get<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    note_read(name);
    obj.get(name).filter(|v| !v.is_null())
}
