//! `redis://` and `rediss://` stores opened by URL ([`RedisBackend`]): the lease options in the
//! URL's query, one direct connection that must answer and know `HSETEX`, and the strategy's
//! errors in the words of the `nononce` command.

use std::time::Duration;

use lease_core::backend::duration;
use lease_core::error_chain;
use lease_core::{Backend, BoxFuture, Explained, MachineId, OpenError, Opened, StoreUrl};

use crate::{AmnesiaGuard, RedisLeaseError, RedisOptions, RedisStrategy};

/// Opens `redis://HOST:PORT[/DB][?key=..&max_lease_s=..&amnesia_guard=off&max_clock_offset_s=..]`
/// stores (`rediss://` with the `tls-rustls` feature) for a program that takes stores by URL.
///
/// Every access opens the same store: a hash needs no schema, and `leases migrate` sets its
/// initialization marker.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisBackend;

impl Backend for RedisBackend {
    fn schemes(&self) -> Vec<&'static str> {
        vec!["redis", "rediss"]
    }

    fn usage(&self) -> Vec<&'static str> {
        vec!["redis://HOST:PORT (or rediss://)"]
    }

    fn open<'a>(&'a self, store: &'a StoreUrl) -> BoxFuture<'a, Result<Opened, OpenError>> {
        Box::pin(async move {
            let (base, options) = url_options(store).map_err(OpenError::new)?;
            let strategy = RedisStrategy::connect(&base, options)
                .await
                .map_err(|e| store.error(describe(&e, store)))?;
            probe(&base, store).await?;
            Ok(Opened::with_admin(strategy))
        })
    }

    fn explain(
        &self,
        error: &(dyn std::error::Error + 'static),
        store: &StoreUrl,
    ) -> Option<Explained> {
        let error = error.downcast_ref::<RedisLeaseError>()?;
        let guard_off = |why: String| {
            format!(
                "{why}. If the server keeps every acknowledged write (Redis: appendonly yes, appendfsync always; SQL: synchronous replication), add amnesia_guard=off to the store URL; max_lease_s=SECONDS (the longest lease any node of this store holds; nononce gen holds {} s) and max_clock_offset_s=SECONDS (the largest offset of a node's clock from the server's; 3600 by default) shorten the hold-off",
                store.terms().lease_duration.as_secs()
            )
        };
        Some(match error {
            RedisLeaseError::InvalidUrl(source) => Explained::new(format!(
                "invalid redis url: {}: use redis://[user:password@]host:port[/db], or rediss://... for TLS",
                error_chain(source)
            )),
            RedisLeaseError::Exhausted { key } => Explained::new(format!(
                "all {} machine ids in hash `{key}` of {} are leased: wait for one to expire, see the holders with `nononce leases list --store '{}'`, or free a dead node's id with `nononce leases release`",
                MachineId::COUNT,
                store.shown(),
                store.redacted()
            )),
            // No guard to turn off and no option to shorten it with: the store must be
            // initialized once, or the wait is the only safe thing.
            RedisLeaseError::LeaseDataMissing { key, remaining } => Explained::held_off(
                *remaining,
                format!(
                    "hash `{key}` has no initialization marker (field `open_at`), so either the store is new or it lost its lease data while the server stayed up (FLUSHALL, FLUSHDB, DEL, eviction) and a node may still use any machine id it held. If the store is new, or every node using it is stopped, run `nononce leases migrate --store '{}'` once; otherwise wait",
                    store.redacted()
                ),
            ),
            RedisLeaseError::AmnesiaWindow {
                uptime,
                hold_off,
                remaining,
            } => Explained::held_off(
                *remaining,
                format!(
                    "the server has been up for only {}, less than the amnesia hold-off ({}), so it may have forgotten leases still in use. If it is new, or no node used it before it started, run `nononce leases migrate --store '{}'` once; otherwise wait, shorten the hold-off (the longest lease and twice the largest clock offset) with max_lease_s and max_clock_offset_s, or, if the server keeps every acknowledged write (appendonly yes, appendfsync always), add amnesia_guard=off",
                    duration(*uptime),
                    duration(*hold_off),
                    store.redacted()
                ),
            ),
            RedisLeaseError::ServerChanged { remaining, .. } => Explained::held_off(
                *remaining,
                guard_off(
                    "the server changed (restart or failover), so it may have missed leases still in use"
                        .to_owned(),
                ),
            ),
            _ => return None,
        })
    }
}

/// `error` as [`RedisBackend::explain`] says it, or its own chain.
fn describe(error: &RedisLeaseError, store: &StoreUrl) -> String {
    RedisBackend
        .explain(error, store)
        .map_or_else(|| error_chain(error), |explained| explained.message)
}

/// The value of store option `key` as whole seconds.
fn seconds(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{key}=`{value}` is not a number of seconds"))
}

/// Splits `?key=..&max_lease_s=..&amnesia_guard=off&max_clock_offset_s=..` off the URL: the
/// URL the client connects to, and the options.
fn url_options(store: &StoreUrl) -> Result<(String, RedisOptions), String> {
    let url = store.url();
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut options = RedisOptions::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        options = match k {
            "key" => options.with_key(v),
            "max_lease_s" => {
                let seconds = seconds(k, v)?;
                let min = store.terms().min_ttl.as_secs();
                if seconds < min {
                    return Err(format!(
                        "max_lease_s={seconds} is shorter than the {min} s minimum lease nononce gen accepts: use max_lease_s={min} or more"
                    ));
                }
                options.with_max_lease_duration(Duration::from_secs(seconds))
            }
            "amnesia_guard" => options.with_amnesia_guard(match v {
                "off" => AmnesiaGuard::Off,
                "hold_off" => AmnesiaGuard::HoldOff,
                _ => return Err(format!("amnesia_guard=`{v}`: use off or hold_off")),
            }),
            "max_clock_offset_s" => {
                options.with_max_clock_offset(Duration::from_secs(seconds(k, v)?))
            }
            _ => {
                return Err(format!(
                    "unknown redis store option `{k}`: use key, max_lease_s, amnesia_guard or max_clock_offset_s"
                ));
            }
        };
    }
    options
        .validate_for(store.terms())
        .map_err(|e| error_chain(&e))?;
    Ok((base.to_owned(), options))
}

/// One direct connection to the server, without the connection manager's retries: it must
/// answer, and know `HSETEX`.
async fn probe(base: &str, store: &StoreUrl) -> Result<(), OpenError> {
    let fail = |e: &redis::RedisError| store.error(probe_failure(e, store));
    let client = redis::Client::open(base).map_err(|e| fail(&e))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(store.connect_timeout()))
        .set_response_timeout(Some(store.connect_timeout()));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| fail(&e))?;
    let hsetex: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("HSETEX")
        .query_async(&mut connection)
        .await
        .map_err(|e| fail(&e))?;
    let known = match &hsetex {
        redis::Value::Array(items) => items.first().is_some_and(|i| *i != redis::Value::Nil),
        _ => true,
    };
    if !known {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .unwrap_or_default();
        let version = ["valkey_version:", "redis_version:"]
            .iter()
            .find_map(|k| {
                info.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| format!(" ({} {})", k.trim_end_matches("_version:"), v.trim()))
            })
            .unwrap_or_default();
        return Err(store.error(format!(
            "the server{version} does not support HSETEX: nononce needs Redis 8.0 or later, or Valkey 9.0 or later"
        )));
    }
    Ok(())
}

/// Why the first connection failed, with what to do: the server's words where it has some,
/// never a client parser's report.
fn probe_failure(e: &redis::RedisError, store: &StoreUrl) -> String {
    use redis::ErrorKind as K;
    let timeout = duration(store.connect_timeout());
    match (e.kind(), e.code()) {
        (_, Some("NOAUTH")) => "the server needs a password: give it in the store URL, redis://:PASSWORD@HOST:PORT (redis://USER:PASSWORD@... for an ACL user), from a variable with --store-env VAR to keep it out of ps".to_owned(),
        (_, Some("WRONGPASS")) | (K::AuthenticationFailed, _) => format!(
            "the server refused the user name or password ({}): check them in the store URL (a server without a password set takes none)",
            error_chain(e)
        ),
        (K::Parse, _) => "the server does not speak the Redis protocol (its answer did not parse): check the host and port (Redis and Valkey listen on 6379 by default)".to_owned(),
        _ if e.is_timeout() && store.scheme() == Some("rediss") => format!(
            "no TLS handshake within {timeout}: if the server does not use TLS, use redis:// instead of rediss://; otherwise check the host and port, or give it longer with --connect-timeout"
        ),
        _ if e.is_timeout() => format!(
            "no answer within {timeout}: check the host and port, or give it longer with --connect-timeout"
        ),
        _ if e.is_io_error() || e.is_connection_refusal() => {
            format!("cannot connect: {}", error_chain(e))
        }
        _ => error_chain(e),
    }
}

#[cfg(test)]
mod tests {
    use lease_core::{Access, LeaseTerms};

    use super::*;

    fn store(url: &str) -> StoreUrl {
        let [lease, min_ttl, margin] = [120, 30, 10].map(Duration::from_secs);
        let terms = LeaseTerms::new(lease, min_ttl, margin);
        StoreUrl::new(url, url, Access::Lease, terms)
    }

    /// The failures no test server here produces (none needs a password) or that a client
    /// reports in its own terms, said as `nononce` says them.
    #[test]
    fn first_connection_failures_say_what_to_do() {
        let s = store("redis://h:1");
        let noauth =
            redis::make_extension_error("NOAUTH".into(), Some("Authentication required.".into()));
        assert_eq!(
            probe_failure(&noauth, &s),
            "the server needs a password: give it in the store URL, redis://:PASSWORD@HOST:PORT (redis://USER:PASSWORD@... for an ACL user), from a variable with --store-env VAR to keep it out of ps"
        );
        let parse = redis::RedisError::from((
            redis::ErrorKind::Parse,
            "Incompatible type",
            "Parse error at 1\nUnexpected `0`".to_owned(),
        ));
        assert_eq!(
            probe_failure(&parse, &s),
            "the server does not speak the Redis protocol (its answer did not parse): check the host and port (Redis and Valkey listen on 6379 by default)"
        );
    }

    #[test]
    fn options_in_the_url() {
        let (base, options) = url_options(&store(
            "redis://h:1/2?key=k&max_lease_s=60&amnesia_guard=off",
        ))
        .unwrap();
        assert_eq!(base, "redis://h:1/2");
        assert_eq!(options.key(), "k");
        assert_eq!(options.max_lease_duration(), Duration::from_secs(60));
        assert_eq!(options.amnesia_guard(), AmnesiaGuard::Off);
        for (url, said) in [
            (
                "redis://h?foo=1",
                "unknown redis store option `foo`: use key, max_lease_s, amnesia_guard or max_clock_offset_s",
            ),
            (
                "redis://h?max_lease_s=abc",
                "max_lease_s=`abc` is not a number of seconds",
            ),
            (
                "redis://h?amnesia_guard=maybe",
                "amnesia_guard=`maybe`: use off or hold_off",
            ),
            (
                "redis://h?max_lease_s=10",
                "max_lease_s=10 is shorter than the 30 s minimum lease nononce gen accepts: use max_lease_s=30 or more",
            ),
        ] {
            assert_eq!(url_options(&store(url)).unwrap_err(), said, "{url}");
        }
    }

    /// What [`RedisBackend::explain`] says of `error` on store `redis://h?key=k`.
    fn explained(error: &RedisLeaseError) -> Explained {
        RedisBackend
            .explain(error, &store("redis://h?key=k"))
            .unwrap()
    }

    #[test]
    fn hold_offs_say_how_to_shorten_them() {
        let said = explained(&RedisLeaseError::LeaseDataMissing {
            key: "k".into(),
            remaining: Duration::from_secs(60),
        });
        assert_eq!(said.hold_off, Some(Duration::from_secs(60)));
        let says = |said: &Explained, text: &str| {
            assert!(said.message.contains(text), "{text}: {}", said.message);
        };
        says(
            &said,
            "run `nononce leases migrate --store 'redis://h?key=k'` once",
        );
        let said = explained(&RedisLeaseError::AmnesiaWindow {
            uptime: Duration::from_secs(5),
            hold_off: Duration::from_secs(36_000),
            remaining: Duration::from_secs(35_995),
        });
        assert!(
            said.message.starts_with(
                "the server has been up for only 5 s, less than the amnesia hold-off (10 h 0 min"
            ),
            "{}",
            said.message
        );
        // A new server is initialized by migrate, on its own process: no wait.
        says(
            &said,
            "If it is new, or no node used it before it started, run `nononce leases migrate --store 'redis://h?key=k'` once",
        );
        let said = explained(&RedisLeaseError::Exhausted { key: "k".into() });
        says(&said, "of store redis://h?key=k are leased");
        assert_eq!(said.hold_off, None);
    }
}
