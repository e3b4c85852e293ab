//! The LoRA adapter the HTTP side knows to be in force ([`Adapters`]): its name (what a
//! request's `model` names to run with it), the directory it was read from and its
//! version, for `/v1/models`, `/health` and the routes' checks.
//!
//! Invariants:
//! - sprout serves one adapter at a time beside the base model;
//! - only `/v1/load_lora_adapter`, `/v1/unload_lora_adapter` and `/update_weights` (which
//!   relabels the adapter one version up: a version names the adapter over one base)
//!   change it, one at a time (`changing`), after the engine thread has put the change in
//!   force; so while one of them holds `changing`, what it reads here is what the engine
//!   runs;
//! - this is a snapshot for the checks on the HTTP side: the engine thread checks again,
//!   when it queues a request, that the adapter the request names is the one in force
//!   (a request never runs on the base model or another adapter in its stead).

use std::sync::RwLock;

/// The adapter in force, as the HTTP side sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedLora {
    /// Its name in the API (`lora_name`, or `--lora`'s directory name).
    pub name: String,
    /// The directory it was read from (`/v1/models`' `root`).
    pub path: String,
    /// What its requests' tokens are labelled with: 1 when loaded, one more at each
    /// in-place load and at each weights update.
    pub version: u64,
}

/// The server's adapter state.
pub struct Adapters {
    in_force: RwLock<Option<ServedLora>>,
    /// Held by a load or an unload from its checks until its change is in force.
    pub changing: tokio::sync::Mutex<()>,
    /// `--max-lora-rank`: the largest rank an adapter may have.
    pub max_rank: usize,
}

impl Adapters {
    pub fn new(in_force: Option<ServedLora>, max_rank: usize) -> Adapters {
        Adapters {
            in_force: RwLock::new(in_force),
            changing: tokio::sync::Mutex::new(()),
            max_rank,
        }
    }

    /// The adapter in force, if any.
    pub fn get(&self) -> Option<ServedLora> {
        self.in_force
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records the adapter now in force (`None`: none).
    pub fn set(&self, lora: Option<ServedLora>) {
        *self.in_force.write().unwrap_or_else(|e| e.into_inner()) = lora;
    }

    /// Whether `name` is the adapter in force.
    pub fn serves(&self, name: &str) -> bool {
        self.in_force
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|l| l.name == name)
    }
}
