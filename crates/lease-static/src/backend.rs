//! `env:VAR` and `hosts:NAME=ID,...` stores opened by URL ([`StatefulSetBackend`],
//! [`HostListBackend`]). They derive the ID from the node itself: they only lease, and have
//! nothing to list, free or migrate.

use lease_core::error_chain;
use lease_core::{Access, Backend, BoxFuture, OpenError, Opened, StoreUrl};

use crate::{HostListStrategy, StatefulSetStrategy};

/// Opens `env:VAR` stores: the machine ID from the trailing digits of a StatefulSet pod name
/// in the environment variable `VAR` ([`StatefulSetStrategy::from_env`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StatefulSetBackend;

/// Opens `hosts:NAME=ID,NAME=ID,...` stores: the machine ID of this host's entry in the node
/// list ([`HostListStrategy::new`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostListBackend;

/// Static stores only lease: the operator commands have nothing to work on.
fn lease_only(store: &StoreUrl) -> Result<(), OpenError> {
    if store.access() == Access::Lease {
        Ok(())
    } else {
        Err(OpenError::new(
            "env: and hosts: stores derive the id from the node itself: there is no lease table to inspect",
        ))
    }
}

impl Backend for StatefulSetBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["env"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["env:VAR"]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            lease_only(store)?;
            let variable = store.url().strip_prefix("env:").unwrap_or_default();
            let strategy = StatefulSetStrategy::from_env(variable)
                .map_err(|e| store.error(error_chain(&e)))?;
            Ok(Opened::new(strategy))
        })
    }
}

impl Backend for HostListBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["hosts"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["hosts:NAME=ID,NAME=ID,..."]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            lease_only(store)?;
            let list = store.url().strip_prefix("hosts:").unwrap_or_default();
            let nodes: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let strategy =
                HostListStrategy::new(&nodes).map_err(|e| store.error(error_chain(&e)))?;
            Ok(Opened::new(strategy))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lease_core::LeaseTerms;

    use super::*;

    fn store(url: &str, access: Access) -> StoreUrl {
        let terms = LeaseTerms::new(
            Duration::from_secs(120),
            Duration::from_secs(30),
            Duration::from_secs(10),
        );
        StoreUrl::new(url, url, access, terms)
    }

    fn open(backend: &dyn Backend, store: &StoreUrl) -> Result<Opened, OpenError> {
        futures::executor::block_on(backend.open(store))
    }

    #[test]
    fn only_leasing_opens_a_static_store() {
        for (backend, url) in [
            (&StatefulSetBackend as &dyn Backend, "env:PATH"),
            (&HostListBackend, "hosts:"),
        ] {
            for access in [Access::Read, Access::Migrate] {
                let error = open(backend, &store(url, access)).unwrap_err();
                assert_eq!(
                    error.message,
                    "env: and hosts: stores derive the id from the node itself: there is no lease table to inspect"
                );
            }
        }
    }

    #[test]
    fn a_bad_store_is_named_with_the_strategy_s_own_words() {
        let error = open(&HostListBackend, &store("hosts:,,", Access::Lease)).unwrap_err();
        assert!(
            error
                .message
                .starts_with("store hosts:,,: node list is empty"),
            "{error}"
        );
        let variable = "LEASE_STATIC_BACKEND_TEST_UNSET";
        let url = format!("env:{variable}");
        let error = open(&StatefulSetBackend, &store(&url, Access::Lease)).unwrap_err();
        assert!(
            error.message.starts_with(&format!(
                "store {url}: environment variable {variable} is not set"
            )),
            "{error}"
        );
    }

    #[test]
    fn a_listed_host_leases_without_an_admin() {
        use crate::{IdentifierSource as _, SystemIdentifiers};
        let this = SystemIdentifiers::new().identifiers().unwrap();
        let url = format!("hosts:{}=3, other.invalid=4", this[0]);
        let opened = open(&HostListBackend, &store(&url, Access::Lease)).unwrap();
        assert!(opened.admin.is_none());
        assert!(opened.strategy.profile_boxed().deterministic);
    }
}
