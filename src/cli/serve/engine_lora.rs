//! The engine loop's side of the LoRA routes (`lora` is the HTTP side): uploading an
//! adapter read off the engine thread and putting it in force between two steps,
//! removing it, and checking that the requests queued for an adapter name the one in
//! force.
//!
//! Invariants:
//! - one adapter at a time: loading another name while one is loaded is refused (409),
//!   the same name only with `load_inplace` (then one version up; requests in flight with
//!   it go on under the new contents, each token labelled with the version that drew it);
//! - a refused load changes nothing: the adapter in force, if any, stays;
//! - an adapter is removed only when no request with it is unfinished, counting those
//!   held for a pause, a drain or a wake (`Engine::set_lora(None)` refuses too), so a
//!   request for an adapter never runs on the base model in its stead; a request queued
//!   for a name that is not the adapter in force by then is refused (404).

use axum::http::StatusCode;
use sprout::model::lora::LoraAdapter;
use sprout::model::lora::device::DeviceLora;

use crate::cli::serve::engine_loop::EngineLoop;
use crate::cli::serve::error::ApiError;
use crate::cli::serve::messages::Refusal;

impl EngineLoop<'_> {
    /// Refuses requests for `adapter` unless it is the adapter in force.
    pub(super) fn check_adapter(&self, adapter: Option<&str>) -> Result<(), Refusal> {
        let in_force = self.engine.decoder().adapter();
        match (adapter, in_force) {
            (Some(name), Some(a)) if a.name == name => Ok(()),
            (name, _) => Err(Refusal::UnknownModel(format!(
                "the LoRA adapter `{}` is not loaded (it was unloaded before the request was \
                 queued)",
                name.unwrap_or_default()
            ))),
        }
    }

    /// Uploads `adapter` and puts it in force under `name`; its version.
    pub(super) fn load_lora(
        &mut self,
        adapter: &LoraAdapter,
        name: String,
        inplace: bool,
    ) -> Result<u64, ApiError> {
        let version = match self.engine.decoder().adapter() {
            Some(a) if a.name != name => return Err(another_loaded(&a.name)),
            Some(_) if !inplace => return Err(already_loaded(&name)),
            Some(a) => a.version.saturating_add(1),
            None => 1,
        };
        let device = {
            let decoder = self.engine.decoder();
            DeviceLora::upload(&decoder.gpu, adapter, &decoder.config, &name, version)
                .map_err(|e| ApiError::bad("lora_path", e.to_string()))?
        };
        self.engine
            .set_lora(Some(device))
            .map_err(|e| ApiError::status(StatusCode::CONFLICT, e.to_string()))?;
        self.metrics.set_lora(Some(version));
        self.refresh_memory();
        Ok(version)
    }

    /// Removes the adapter `name`.
    pub(super) fn unload_lora(&mut self, name: &str) -> Result<(), ApiError> {
        let loaded = self.engine.decoder().adapter();
        if loaded.is_none_or(|a| a.name != name) {
            return Err(not_found(name));
        }
        let unfinished = self.lora_requests();
        if unfinished > 0 {
            return Err(ApiError::status(
                StatusCode::CONFLICT,
                format!(
                    "the LoRA adapter '{name}' has {unfinished} unfinished requests (queued \
                     or running): let them finish or abort them (/abort_requests), then \
                     unload it"
                ),
            ));
        }
        self.engine
            .set_lora(None)
            .map_err(|e| ApiError::status(StatusCode::CONFLICT, e.to_string()))?;
        self.metrics.set_lora(None);
        self.refresh_memory();
        Ok(())
    }
}

/// Loading a name while another adapter is loaded.
pub fn another_loaded(loaded: &str) -> ApiError {
    ApiError {
        param: Some("lora_name".into()),
        ..ApiError::status(
            StatusCode::CONFLICT,
            format!(
                "the LoRA adapter '{loaded}' is loaded, and sprout serves one adapter at a \
                 time: unload it first (POST /v1/unload_lora_adapter)"
            ),
        )
    }
}

/// Loading the name of the adapter in force without `load_inplace` (vLLM's words).
pub fn already_loaded(name: &str) -> ApiError {
    ApiError::bad(
        "lora_name",
        format!(
            "The lora adapter '{name}' has already been loaded. If you want to load the \
             adapter in place, set 'load_inplace' to True."
        ),
    )
}

/// Unloading a name that is not loaded (vLLM's words).
pub fn not_found(name: &str) -> ApiError {
    ApiError {
        param: Some("lora_name".into()),
        ..ApiError::status(
            StatusCode::NOT_FOUND,
            format!("The lora adapter '{name}' cannot be found."),
        )
    }
}
