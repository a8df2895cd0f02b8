//! Policy uploads in progress, bounded per tenant (`--max-uploads-per-tenant`, 1 by default): an
//! upload is read whole before the component is loaded, so 16 uploads of 60 MiB whose last byte
//! was withheld once held 1.2 GB for as long as their clients kept them open. A tenant's upload
//! takes a place here before a byte of it is read — whoever sends it, the tenant's admin or the
//! operator — and its bytes count against the proxy's reading budget (`--max-reading-mib`); one
//! past the bound gets 429 at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::front::error::ApiError;

/// The uploads in progress, per tenant.
pub struct Uploads {
    per_tenant: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One upload's place; dropping it frees the place.
pub struct UploadPlace {
    uploads: Arc<Uploads>,
    tenant: String,
}

impl Uploads {
    /// At most `per_tenant` uploads in progress per tenant.
    pub fn new(per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            per_tenant,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for an upload to `tenant`, or a 429 naming the flag.
    pub fn take(self: &Arc<Self>, tenant: &str) -> Result<UploadPlace, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(tenant.to_string()).or_insert(0);
        if *count >= self.per_tenant {
            return Err(ApiError::too_many_requests(format!(
                "tenant {tenant} has {count} policy upload(s) in progress, its limit (--max-uploads-per-tenant {}); \
                 send this one again after the other is answered",
                self.per_tenant
            )));
        }
        *count += 1;
        Ok(UploadPlace {
            uploads: self.clone(),
            tenant: tenant.to_string(),
        })
    }
}

impl Drop for UploadPlace {
    fn drop(&mut self) {
        let mut open = self.uploads.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.tenant) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_uploads_are_bounded_and_its_places_come_back() {
        let uploads = Uploads::new(1);
        let first = uploads.take("alpha").unwrap();
        let e = uploads.take("alpha").err().unwrap();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.contains("--max-uploads-per-tenant 1"), "{}", e.message);
        let _beta = uploads.take("beta").expect("another tenant's place is its own");
        drop(first);
        assert!(uploads.take("alpha").is_ok());
        assert_eq!(
            uploads.open.lock().unwrap().len(),
            1,
            "a tenant without uploads is not kept"
        );
    }
}
