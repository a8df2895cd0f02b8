//! The Responses API's stored responses a tenant may continue. The engine keeps one response
//! store for every tenant, so `previous_response_id` is accepted only for an id the engine gave
//! one of this tenant's own calls (streamed or not); the table is bounded like the session table.

use std::sync::Mutex;

use crate::table::LruTable;

/// The ids of a tenant's stored responses, least recently used forgotten first.
pub struct StoredResponses(Mutex<LruTable<String, ()>>);

impl StoredResponses {
    /// An empty table that keeps at most `max_entries` ids (`--max-sessions`).
    pub fn new(max_entries: usize) -> Self {
        Self(Mutex::new(LruTable::new(max_entries, usize::MAX)))
    }

    /// The engine answered one of the tenant's Responses calls with response `id`.
    pub fn record(&self, id: &str) {
        let mut ids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !ids.contains(&id.to_string()) {
            ids.insert(id.to_string(), (), id.len());
        }
    }

    /// Whether response `id` is one of the tenant's (recorded, not yet forgotten).
    pub fn owns(&self, id: &str) -> bool {
        let mut ids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        ids.get_mut(&id.to_string()).is_some()
    }
}
