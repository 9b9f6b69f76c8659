//! `env:VAR` and `hosts:NAME=ID,...` stores opened by URL ([`StatefulSetBackend`],
//! [`HostListBackend`]). They derive the ID from the node itself: they only lease, and have
//! nothing to list, free or migrate.

use lease_core::{
    Access, Backend, BoxFuture, LeaseError, OpenError, Opened, StoreUrl, Strategy, error_chain,
};

use crate::{HostListStrategy, StatefulSetStrategy};

/// Opens `env:VAR` stores: the machine ID from the trailing digits of a StatefulSet pod name
/// in the environment variable `VAR` ([`StatefulSetStrategy::from_env`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StatefulSetBackend;

/// Opens `hosts:NAME=ID,NAME=ID,...` stores: the machine ID of this host's entry in the node
/// list ([`HostListStrategy::new`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostListBackend;

/// Opens `store` with the strategy `make` builds from what follows the URL's scheme. Static
/// stores only lease: the operator commands have nothing to work on.
fn open_static<S: Strategy + 'static, E: LeaseError>(
    store: &StoreUrl,
    make: impl FnOnce(&str) -> Result<S, E>,
) -> Result<Opened, OpenError> {
    if store.access() != Access::Lease {
        return Err(OpenError::new(
            "env: and hosts: stores derive the id from the node itself: there is no lease table to inspect",
        ));
    }
    let rest = store.url().split_once(':').map_or("", |(_, rest)| rest);
    let strategy = make(rest).map_err(|e| store.error(error_chain(&e)))?;
    Ok(Opened::new(strategy))
}

impl Backend for StatefulSetBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["env"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["env:VAR"]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move { open_static(store, StatefulSetStrategy::from_env) })
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
            open_static(store, |list| {
                let nodes: Vec<&str> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                HostListStrategy::new(&nodes)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(url: &str, access: Access) -> StoreUrl {
        StoreUrl::new(url, url, access, crate::Timing::DEFAULT_TERMS)
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
