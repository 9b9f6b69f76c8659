//! `zk://` stores opened by URL ([`ZooKeeperBackend`]): one read of the root through a new
//! session, which fails fast with the cause when no server answers, and the strategy's errors in
//! the words of the `nononce` command.

use lease_core::backend::duration;
use lease_core::error_chain;
use lease_core::{
    Access, Backend, BoxFuture, Explained, MachineId, OpenError, Opened, StoreAdmin, StoreUrl,
    Strategy as _,
};

use crate::{ZooKeeperLeaseError, ZooKeeperOptions, ZooKeeperStrategy};

/// Opens `zk://host:port[,host:port...][/root][?session_timeout_s=N&max_session_timeout_s=N&max_clock_offset_s=N]`
/// stores for a program that takes stores by URL.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZooKeeperBackend;

const URL_FORM: &str = "use zk://host:port[,host:port...][/root][?session_timeout_s=N&max_session_timeout_s=N&max_clock_offset_s=N]";

impl Backend for ZooKeeperBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["zk"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["zk://HOST:PORT[,HOST:PORT...][/ROOT]"]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            let options = ZooKeeperOptions::from_url(store.url())
                .map_err(|e| store.error(describe(&e, store)))?
                .with_connect_timeout(store.connect_timeout());
            let strategy =
                ZooKeeperStrategy::new(options).map_err(|e| store.error(describe(&e, store)))?;
            if store.access() == Access::Lease
                && let Err(e) = strategy.check_terms(store.terms())
            {
                return Err(store.error(describe(&e, store)));
            }
            reachable(strategy.options().hosts(), store).await?;
            probe(&strategy, store).await?;
            Ok(Opened::with_admin(strategy))
        })
    }

    fn explain(
        &self,
        error: &(dyn std::error::Error + 'static),
        store: &StoreUrl,
    ) -> Option<Explained> {
        use ZooKeeperLeaseError as E;
        let e = error.downcast_ref::<ZooKeeperLeaseError>()?;
        let shown = store.shown();
        Some(Explained::new(match e {
            E::Exhausted { root, guarded } => format!(
                "all {} machine ids under root `{root}` of {shown} are held{}: wait for one to expire, see the holders with `nononce leases list --store '{}'`, or free a dead node's id with `nononce leases release`",
                MachineId::COUNT,
                if *guarded > 0 {
                    format!(" ({guarded} of them only in their release guard, free within seconds)")
                } else {
                    String::new()
                },
                store.redacted()
            ),
            E::InvalidUrl(why) if !why.contains("use zk://") => format!("{e}: {URL_FORM}"),
            E::InvalidOptions(why) if why.contains("min_ttl") => format!(
                "{shown}: leases on it would be shorter than the {} s minimum nononce gen accepts: use session_timeout_s={} or more in the store url (and as much maxSessionTimeout on the servers)",
                store.terms().min_ttl.as_secs(),
                (store.terms().min_ttl.as_secs() * 4).div_ceil(3)
            ),
            E::SessionTimeout { .. } => format!("{shown}: {e}"),
            E::Timeout { .. } => format!(
                "{shown}: {e}: check that the hosts are ZooKeeper client ports (2181 by default) and that a quorum of the ensemble is up (zkServer.sh status on each server)"
            ),
            E::StoreRewound { what, remaining } => {
                return Some(Explained::held_off(
                    *remaining,
                    format!(
                        "the zookeeper ensemble went back in time ({what}: a snapshot restore, or every server started on an empty data directory), so it may lack leases still in use; max_session_timeout_s=SECONDS (the longest session timeout any node of this root uses) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the others'; 3600 by default) in the store url set the hold-off"
                    ),
                ));
            }
            E::NotInitialized { root, remaining } => {
                return Some(Explained::held_off(
                    *remaining,
                    format!(
                        "the zookeeper root `{root}` has no initialization marker (`{root}/initialized`), so either the root is new or its znodes were deleted while nodes ran (deleteall {root}) and a node may still use any machine id it held. If the root is new, or every node using it is stopped, run `nononce leases migrate --store '{}'` once; otherwise wait",
                        store.redacted()
                    ),
                ));
            }
            E::Request { source, .. } => {
                use zookeeper_client::Error as Z;
                match source {
                    Z::NoHosts | Z::ConnectionLoss | Z::Timeout | Z::Custom(_) => format!(
                        "{shown} did not answer: {e}: check that the hosts are ZooKeeper client ports (2181 by default) and that a quorum of the ensemble is up"
                    ),
                    Z::NoAuth | Z::InvalidAcl => format!(
                        "{shown}: {e}: the root's ACL does not let this client create and delete znodes under it: use another root, or grant world:anyone cdrwa on it (setAcl)"
                    ),
                    Z::AuthFailed => format!("{shown} refused the credentials: {e}"),
                    _ => format!("{shown}: {e}"),
                }
            }
            _ => format!("{shown}: {}", error_chain(e)),
        }))
    }
}

/// `error` as [`ZooKeeperBackend::explain`] says it.
fn describe(error: &ZooKeeperLeaseError, store: &StoreUrl) -> String {
    ZooKeeperBackend
        .explain(error, store)
        .map_or_else(|| error_chain(error), |explained| explained.message)
}

/// At least one host must accept a TCP connection within the connect timeout; when none does,
/// the error names each one's cause (the client would only say that no host was available).
async fn reachable(hosts: &str, store: &StoreUrl) -> Result<(), OpenError> {
    let timeout = store.connect_timeout();
    // All at once: a dead host costs the timeout once, not once per host.
    let mut attempts = tokio::task::JoinSet::new();
    for (index, host) in hosts.split(',').map(str::to_owned).enumerate() {
        attempts.spawn(async move {
            let result =
                match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&host)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(format!("{host}: {e}")),
                    Err(_) => Err(format!("{host}: no answer within {}", duration(timeout))),
                };
            (index, result)
        });
    }
    let mut causes = Vec::new();
    while let Some(joined) = attempts.join_next().await {
        match joined {
            Ok((_, Ok(()))) => return Ok(()),
            Ok((index, Err(cause))) => causes.push((index, cause)),
            Err(e) => causes.push((usize::MAX, e.to_string())),
        }
    }
    causes.sort();
    let causes: Vec<String> = causes.into_iter().map(|(_, cause)| cause).collect();
    Err(store.error(format!(
        "cannot connect to {}: check that the hosts are ZooKeeper client ports (2181 by default) and that the servers run",
        causes.join("; ")
    )))
}

/// The store must answer one read of the root within the connect timeout.
async fn probe(strategy: &ZooKeeperStrategy, store: &StoreUrl) -> Result<(), OpenError> {
    match tokio::time::timeout(store.connect_timeout(), StoreAdmin::free_count(strategy)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(store.error(describe(&e, store))),
        Err(_) => Err(store.error(format!(
            "no answer within {}: check that the hosts are ZooKeeper client ports (2181 by default) and that a quorum of the ensemble is up",
            duration(store.connect_timeout())
        ))),
    }
}
