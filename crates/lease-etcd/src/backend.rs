//! `etcd://` and `etcds://` stores opened by URL ([`EtcdBackend`]): the endpoints that accept a
//! connection (members that are down are left out for the run), one read of the prefix that
//! checks the credentials, and the strategy's errors in the words of the `nononce` command.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use lease_core::backend::duration;
use lease_core::error_chain;
use lease_core::{
    Access, Backend, BoxFuture, Explained, MachineId, OpenError, Opened, StoreAdmin, StoreUrl,
    Strategy as _,
};

use crate::keys::DEFAULT_PREFIX;
use crate::{EtcdLeaseError, EtcdOptions, EtcdStrategy};

/// Opens `etcd://[user:password@]host:port[,host:port...][/prefix/][?max_lease_s=N&max_clock_offset_s=N]`
/// stores (`etcds://` with the `tls` feature) for a program that takes stores by URL.
///
/// The etcd client balances its requests over the endpoints and would only time out on a
/// member that is down: opening connects to each once, and leaves out those that do not accept
/// a connection as long as one does.
#[derive(Debug, Clone, Copy, Default)]
pub struct EtcdBackend;

/// How long the other endpoints may take to accept a TCP connection once one has; those that
/// take longer are left out with those that refuse.
const GRACE: Duration = Duration::from_millis(500);

const URL_FORM: &str = "use etcd://[user:password@]host:port[,host:port...][/prefix/][?max_lease_s=N&max_clock_offset_s=N], with %XX escapes in the user name, password and prefix";

impl Backend for EtcdBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["etcd", "etcds"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["etcd://HOST:PORT[,HOST:PORT...] (or etcds://)"]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            let url = store.url();
            // lease-etcd quotes a password it cannot decode: hidden here as in the URL.
            let options = EtcdOptions::from_url(url).map_err(|e| {
                let error = store.error(describe(&e, store));
                match password(url) {
                    Some(password) => OpenError::new(error.message.replace(password, "***")),
                    None => error,
                }
            })?;
            let max_lease = options.max_lease_duration();
            let strategy =
                EtcdStrategy::new(options).map_err(|e| store.error(describe(&e, store)))?;
            if store.access() == Access::Lease && strategy.check_terms(store.terms()).is_err() {
                let min = store.terms().min_ttl.as_secs();
                return Err(store.error(format!(
                    "max_lease_s={} is shorter than the {min} s minimum lease nononce gen accepts: use max_lease_s={min} or more",
                    max_lease.as_secs()
                )));
            }
            let strategy = match reachable(&strategy, store).await? {
                // The client would keep sending part of the requests to a member that is down.
                Some(hosts) => EtcdStrategy::from_url(&with_hosts(url, &hosts))
                    .map_err(|e| store.error(describe(&e, store)))?,
                None => strategy,
            };
            probe(&strategy, store).await?;
            Ok(Opened::with_admin(strategy))
        })
    }

    fn explain(
        &self,
        error: &(dyn std::error::Error + 'static),
        store: &StoreUrl,
    ) -> Option<Explained> {
        use EtcdLeaseError as E;
        use etcd_client::Error as Client;
        let e = error.downcast_ref::<EtcdLeaseError>()?;
        let shown = store.shown();
        let gen_holds = store.terms().lease_duration.as_secs();
        Some(Explained::new(match e {
            E::Exhausted { prefix } => format!(
                "all {} machine ids in prefix `{prefix}` of {shown} are leased: wait for one to expire, see the holders with `nononce leases list --store '{}'`, or free a dead node's id with `nononce leases release`",
                MachineId::COUNT,
                store.redacted()
            ),
            E::InvalidUrl(why) if !why.contains("use etcd://") => format!("{e}: {URL_FORM}"),
            E::Timeout { .. } => format!(
                "{shown}: {e}: check that the endpoints are etcd client URLs (port 2379 by default) and the cluster has a leader"
            ),
            // etcd keeps every acknowledged write: there is no guard to turn off, only the
            // longest lease to shorten.
            E::StoreRewound { what, remaining } => {
                return Some(Explained::held_off(
                    *remaining,
                    format!(
                        "the etcd store went back in time ({what}: a snapshot restore, or a member started on an empty data directory), so it may lack leases still in use; max_lease_s=SECONDS (the longest lease any node of this store holds; nononce gen holds {gen_holds} s) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the others'; 3600 by default) shorten the hold-off"
                    ),
                ));
            }
            E::NotInitialized { prefix, remaining } => {
                return Some(Explained::held_off(
                    *remaining,
                    format!(
                        "the etcd prefix `{prefix}` has no initialization marker (`{prefix}initialized`), so either the prefix is new or its keys were deleted while nodes ran (etcdctl del --prefix) and a node may still use any machine id it held. If the prefix is new, or every node using it is stopped, run `nononce leases migrate --store '{}'` once; otherwise wait",
                        store.redacted()
                    ),
                ));
            }
            E::Request { operation, source } => {
                let cause = match source {
                    // The status's message alone ("etcdserver: permission denied"), not its
                    // metadata.
                    Client::GRpcStatus(status) if !status.message().is_empty() => {
                        status.message().to_owned()
                    }
                    other => error_chain(other),
                };
                let text = if cause.contains("etcd") {
                    cause.clone()
                } else {
                    format!("etcd {operation} failed: {cause}")
                };
                if cause.contains("authentication is not enabled") {
                    format!(
                        "{shown}: {text}: remove user:password@ from the store URL, or turn authentication on in the cluster"
                    )
                } else if cause.contains("authentication failed")
                    || cause.contains("user name")
                    || cause.contains("invalid auth token")
                {
                    format!(
                        "{shown} refused the credentials: {text}: check the user and password in the store URL"
                    )
                } else if cause.contains("permission denied") {
                    let prefix = EtcdOptions::from_url(store.url())
                        .map_or_else(|_| DEFAULT_PREFIX.to_owned(), |o| o.prefix().to_owned());
                    format!(
                        "{shown}: {text}: the user's role needs readwrite on the prefix `{prefix}` (etcdctl role grant-permission ROLE readwrite {prefix} --prefix=true)"
                    )
                } else if cause.contains("space exceeded") {
                    format!(
                        "{shown}: {text}: the etcd database is full: compact and defragment it, then disarm the alarm (etcdctl alarm disarm)"
                    )
                } else if lease_core::LeaseError::kind(e).is_retryable() {
                    format!(
                        "{shown} did not answer or dropped the connection: {text}: check that the endpoints are etcd client URLs (port 2379 by default) and the cluster has a leader"
                    )
                } else {
                    format!("{shown}: {text}")
                }
            }
            _ => error_chain(e),
        }))
    }
}

/// `error` as [`EtcdBackend::explain`] says it.
fn describe(error: &EtcdLeaseError, store: &StoreUrl) -> String {
    EtcdBackend
        .explain(error, store)
        .map_or_else(|| error_chain(error), |explained| explained.message)
}

/// The password in the user info of `url`, as written.
fn password(url: &str) -> Option<&str> {
    let start = url.find("://")? + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let at = url[start..end].rfind('@').map(|i| start + i)?;
    let colon = url[start..at].find(':').map(|i| start + i)?;
    Some(&url[colon + 1..at]).filter(|p| !p.is_empty())
}

/// One attempt to connect to an endpoint: `Err` says why not.
type Attempt = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Which endpoints accept a TCP connection: `None` when all do, the hosts that do (in the
/// URL's order) when only some do, and an error naming each one's cause when none does (the
/// etcd client, balancing over them, would only time out).
async fn reachable(
    strategy: &EtcdStrategy,
    store: &StoreUrl,
) -> Result<Option<Vec<String>>, OpenError> {
    let hosts: Vec<String> = strategy
        .options()
        .endpoints()
        .iter()
        // `http://host:port`: its `host:port`.
        .map(|e| {
            e.split_once("://")
                .map_or(e.as_str(), |(_, host)| host)
                .to_owned()
        })
        .collect();
    let timeout = store.connect_timeout();
    let mut attempts: Vec<Option<Attempt>> = hosts
        .iter()
        .map(|host| {
            let host = host.clone();
            Some(Box::pin(async move {
                match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&host)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {}", duration(timeout))),
                }
            }) as Attempt)
        })
        .collect();
    let mut results: Vec<Option<Result<(), String>>> = vec![None; hosts.len()];
    // All at once; once one has connected, the others get the grace period to follow.
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        for (slot, result) in attempts.iter_mut().zip(&mut results) {
            if let Some(attempt) = slot
                && let Poll::Ready(done) = attempt.as_mut().poll(cx)
            {
                if done.is_ok() && grace.is_none() {
                    grace = Some(Box::pin(tokio::time::sleep(GRACE)));
                }
                *result = Some(done);
                *slot = None;
            }
        }
        let grace_over = grace
            .as_mut()
            .is_some_and(|g| g.as_mut().poll(cx).is_ready());
        if grace_over || attempts.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    let live: Vec<String> = hosts
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Some(Ok(()))))
        .map(|(h, _)| h.clone())
        .collect();
    if live.len() == hosts.len() {
        return Ok(None);
    }
    if !live.is_empty() {
        return Ok(Some(live));
    }
    let why = |r: &Option<Result<(), String>>| match r {
        Some(Err(why)) => why.clone(),
        _ => "no answer".to_owned(),
    };
    Err(store.error(match results.as_slice() {
        [only] => format!("cannot connect: {}", why(only)),
        _ => format!(
            "cannot connect to any endpoint: {}",
            hosts
                .iter()
                .zip(&results)
                .map(|(h, r)| format!("{h}: {}", why(r)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }))
}

/// An etcd URL with only `hosts` in its host list.
fn with_hosts<S: std::borrow::Borrow<str>>(url: &str, hosts: &[S]) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let credentials = authority
        .rsplit_once('@')
        .map_or(String::new(), |(c, _)| format!("{c}@"));
    format!("{scheme}://{credentials}{}{tail}", hosts.join(","))
}

/// The store must answer one read of the prefix (retried as the operator commands are, on a
/// cluster of several endpoints), which also checks the credentials and the read permission.
async fn probe(strategy: &EtcdStrategy, store: &StoreUrl) -> Result<(), OpenError> {
    match tokio::time::timeout(store.connect_timeout(), StoreAdmin::free_count(strategy)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(store.error(describe(&e, store))),
        Err(_) => Err(store.error(format!(
            "no answer within {}: check that the endpoints are etcd client URLs (port 2379 by default)",
            duration(store.connect_timeout())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use lease_core::LeaseTerms;

    use super::*;

    fn store(url: &str) -> StoreUrl {
        let [lease, min_ttl, margin] = [120, 30, 10].map(Duration::from_secs);
        let terms = LeaseTerms::new(lease, min_ttl, margin);
        StoreUrl::new(url, url, Access::Lease, terms).with_connect_timeout(Duration::from_secs(2))
    }

    /// Why opening `store` failed.
    fn open_error(store: &StoreUrl) -> OpenError {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(EtcdBackend.open(store))
            .unwrap_err()
    }

    #[test]
    fn passwords_in_user_info() {
        assert_eq!(password("etcd://me:p%zz@a:1/p/"), Some("p%zz"));
        assert_eq!(password("redis://:pw@cache:6379/0"), Some("pw"));
        assert_eq!(password("etcd://me@a:1"), None);
        assert_eq!(password("etcd://a:1/x@y"), None);
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            with_hosts("etcd://me:pw@a:1,b:2,c:3/p/?max_lease_s=60", &["b:2"]),
            "etcd://me:pw@b:2/p/?max_lease_s=60"
        );
        assert_eq!(
            with_hosts("etcds://a:1,[::1]:3", &["a:1", "[::1]:3"]),
            "etcds://a:1,[::1]:3"
        );
        assert_eq!(
            with_hosts("etcd://a:1,b:2?max_lease_s=60", &["a:1"]),
            "etcd://a:1?max_lease_s=60"
        );
    }

    #[test]
    fn an_undecodable_password_is_not_quoted() {
        let store = StoreUrl::new(
            "etcd://me:p%zz@127.0.0.1:1/p/",
            "etcd://me:***@127.0.0.1:1/p/",
            Access::Read,
            *store("etcd://a:1").terms(),
        );
        let error = open_error(&store);
        assert!(
            error.message.starts_with(
                "store etcd://me:***@127.0.0.1:1/p/: invalid etcd url: bad %-escape in `***`"
            ),
            "{error}"
        );
        assert!(!error.message.contains("p%zz"), "{error}");
    }

    #[test]
    fn a_short_longest_lease_is_refused_before_connecting() {
        let url = "etcd://127.0.0.1:1?max_lease_s=10";
        let error = open_error(&store(url));
        assert_eq!(
            error.message,
            format!(
                "store {url}: max_lease_s=10 is shorter than the 30 s minimum lease nononce gen accepts: use max_lease_s=30 or more"
            )
        );
    }

    #[test]
    fn endpoints_that_are_down_are_named_with_their_cause() {
        let url = "etcd://127.0.0.1:1,127.0.0.1:2";
        let error = open_error(&store(url));
        assert!(
            error.message.starts_with(&format!(
                "store {url}: cannot connect to any endpoint: 127.0.0.1:1: "
            )) && error.message.contains("; 127.0.0.1:2: "),
            "{error}"
        );
    }
}
