//! Settings of the etcd lease strategy, and the `etcd://` URL form.

use std::time::Duration;

use crate::error::EtcdLeaseError;
use crate::keys::DEFAULT_PREFIX;

/// The default [`EtcdOptions::with_max_clock_offset`]: an hour, the clock difference between
/// nodes that a handover tolerates anyway.
const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);

/// etcd's longest lease TTL (`MaxLeaseTTL`, 9,000,000,000 s): the amnesia hold-off is one.
const LONGEST_ETCD_LEASE: Duration = Duration::from_secs(9_000_000_000);

/// Settings of an [`EtcdStrategy`](crate::EtcdStrategy).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `endpoints` | (required) | `http://host:port` of the members (`https://` with the `tls` feature); requests are balanced over them |
/// | `prefix` | `/nononce/leases/` | keys: `<prefix><id>` per leased ID, `<prefix>floor/<id>` per timestamp floor |
/// | `user` | none | user name and password (etcd authentication) |
/// | `tls` | none | TLS settings (feature `tls`) |
/// | `acquire_attempts` | 3 | claims tried per acquire before answering `Conflict` |
/// | `max_lease_duration` | 8 h | longest lease granted; longer requests are shortened to it |
/// | `max_clock_offset` | 1 h | largest offset between two nodes' clocks |
/// | `connect_timeout` | 5 s | longest wait for a connection to a member |
/// | `request_timeout` | 5 s | longest wait for one request's answer |
///
/// The amnesia hold-off is `max_lease_duration + 2 × max_clock_offset`
/// ([`amnesia_hold_off`](EtcdOptions::amnesia_hold_off)): how long acquisition holds off after
/// the store was seen to go back in time, or after the prefix was found without its
/// initialization marker (see the crate docs, "Amnesia").
#[derive(Clone)]
pub struct EtcdOptions {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) user: Option<(String, String)>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<etcd_client::TlsOptions>,
    pub(crate) acquire_attempts: u32,
    pub(crate) max_lease_duration: Duration,
    pub(crate) max_clock_offset: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("EtcdOptions");
        d.field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            // Never the password.
            .field("user", &self.user.as_ref().map(|(name, _)| name));
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.field("acquire_attempts", &self.acquire_attempts)
            .field("max_lease_duration", &self.max_lease_duration)
            .field("max_clock_offset", &self.max_clock_offset)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl EtcdOptions {
    /// The defaults (see the table above) for the members at `endpoints`
    /// (`http://127.0.0.1:2379`, ...).
    #[must_use]
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            user: None,
            #[cfg(feature = "tls")]
            tls: None,
            acquire_attempts: 3,
            max_lease_duration: Duration::from_secs(8 * 3600),
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }

    /// Options from a store URL:
    /// `etcd://[user:password@]host:port[,host:port...][/prefix/][?max_lease_s=N&max_clock_offset_s=N]`
    /// (`etcds://` for TLS with the system's root certificates, with the `tls` feature). A path
    /// sets the key prefix (a trailing `/` is added if missing); without one the prefix is
    /// `/nononce/leases/`. `max_lease_s` sets [`with_max_lease_duration`](Self::with_max_lease_duration),
    /// `max_clock_offset_s` [`with_max_clock_offset`](Self::with_max_clock_offset); any other
    /// option is refused by name. User name, password and prefix may use `%XX`
    /// escapes.
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidUrl`] naming what is wrong.
    pub fn from_url(url: &str) -> Result<Self, EtcdLeaseError> {
        let invalid = |why: &str| {
            Err(EtcdLeaseError::InvalidUrl(format!(
                "{why}: use etcd://[user:password@]host:port[,host:port...][/prefix/][?max_lease_s=N&max_clock_offset_s=N]"
            )))
        };
        let (scheme, rest) = match url.split_once("://") {
            Some(("etcd", rest)) => ("http", rest),
            Some(("etcds", rest)) => {
                if !cfg!(feature = "tls") {
                    return invalid("etcds:// needs lease-etcd's `tls` feature");
                }
                ("https", rest)
            }
            _ => return invalid("not an etcd:// url"),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((credentials, hosts)) => {
                let Some((name, password)) = credentials.split_once(':') else {
                    return invalid("credentials must be user:password");
                };
                if name.is_empty() {
                    return invalid("the user name is empty");
                }
                (
                    Some((percent_decode(name)?, percent_decode(password)?)),
                    hosts,
                )
            }
            None => (None, authority),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let Some((name, port)) = host.rsplit_once(':') else {
                return invalid(&format!("endpoint `{host}` has no port"));
            };
            if name.is_empty() || port.parse::<u16>().is_err() {
                return invalid(&format!("endpoint `{host}` is not host:port"));
            }
            endpoints.push(format!("{scheme}://{host}"));
        }
        let mut options = Self::new(endpoints);
        if let Some((name, password)) = user {
            options = options.with_user(name, password);
        }
        if !path.is_empty() && path != "/" {
            let mut prefix = percent_decode(path)?;
            if !prefix.ends_with('/') {
                prefix.push('/');
            }
            options = options.with_prefix(prefix);
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let set = match name {
                "max_lease_s" => Self::with_max_lease_duration,
                "max_clock_offset_s" => Self::with_max_clock_offset,
                other => {
                    return invalid(&format!(
                        "unknown option `{other}` (known: max_lease_s, max_clock_offset_s)"
                    ));
                }
            };
            let Ok(seconds) = value.parse::<u64>() else {
                return invalid(&format!("{name}={value} is not whole seconds"));
            };
            options = set(options, Duration::from_secs(seconds));
        }
        #[cfg(feature = "tls")]
        if scheme == "https" {
            options = options.with_tls(etcd_client::TlsOptions::new().with_native_roots());
        }
        options.validate()?;
        Ok(options)
    }

    /// Sets the key prefix (default `/nononce/leases/`). Every node of a deployment must use the
    /// same prefix; give each deployment its own.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Authenticates as `name` with `password` (etcd `--auth` on). The token is refreshed when
    /// it expires.
    #[must_use]
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Sets TLS (server roots, client identity) for `https://` endpoints.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    #[must_use]
    pub fn with_tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets how many claims one acquire tries before answering `Conflict` (default 3).
    #[must_use]
    pub const fn with_acquire_attempts(mut self, attempts: u32) -> Self {
        self.acquire_attempts = attempts;
        self
    }

    /// Sets the longest lease any node of the deployment may hold (default 8 h). Longer requests
    /// are granted this long; the amnesia hold-off (see the crate docs, "Amnesia") lasts this
    /// long plus twice [`with_max_clock_offset`](Self::with_max_clock_offset).
    #[must_use]
    pub const fn with_max_lease_duration(mut self, max: Duration) -> Self {
        self.max_lease_duration = max;
        self
    }

    /// Sets the largest offset between two nodes' clocks (default 1 h) that the amnesia
    /// hold-off allows for. A holder whose lease was lost may have issued timestamps up to its
    /// own clock at its lease's end, and a successor starts at its own clock (with no floor:
    /// the lost keys took the floors with them): so the hold-off outlasts the longest lease by
    /// twice this offset. etcd reports no server time, so nothing checks the bound: keep the
    /// nodes' clocks synchronised (NTP) within it. Every node of the deployment needs the same
    /// value.
    #[must_use]
    pub const fn with_max_clock_offset(mut self, max: Duration) -> Self {
        self.max_clock_offset = max;
        self
    }

    /// How long acquisition holds off after the store went back in time or the prefix was found
    /// without its initialization marker: `max_lease_duration + 2 × max_clock_offset`.
    #[must_use]
    pub fn amnesia_hold_off(&self) -> Duration {
        lease_core::time::amnesia_hold_off(self.max_lease_duration, self.max_clock_offset)
    }

    /// Sets the longest wait for a connection to a member (default 5 s).
    #[must_use]
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the longest wait for the answer to one request (default 5 s).
    #[must_use]
    pub const fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The endpoints.
    #[must_use]
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The user name, when authentication is set (the password is never returned).
    #[must_use]
    pub fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|(name, _)| name.as_str())
    }

    /// How many claims one acquire tries before answering `Conflict`.
    #[must_use]
    pub const fn acquire_attempts(&self) -> u32 {
        self.acquire_attempts
    }

    /// The longest lease the strategy grants.
    #[must_use]
    pub const fn max_lease_duration(&self) -> Duration {
        self.max_lease_duration
    }

    /// The clock offset between nodes the amnesia hold-off allows for.
    #[must_use]
    pub const fn max_clock_offset(&self) -> Duration {
        self.max_clock_offset
    }

    /// The longest wait for a connection.
    #[must_use]
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The longest wait for the answer to one request.
    #[must_use]
    pub const fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`EtcdLeaseError::InvalidOptions`] naming the setting to change.
    pub fn validate(&self) -> Result<(), EtcdLeaseError> {
        let invalid = |why: &str| Err(EtcdLeaseError::InvalidOptions(why.to_owned()));
        if self.endpoints.is_empty() {
            return invalid("at least one endpoint is needed");
        }
        if self.prefix.is_empty() {
            return invalid("prefix must not be empty");
        }
        if self.acquire_attempts == 0 {
            return invalid("acquire_attempts must be at least 1");
        }
        if self.max_lease_duration < Duration::from_secs(1) {
            return invalid(
                "max_lease_duration must be at least 1 s (etcd leases are whole seconds)",
            );
        }
        if self.amnesia_hold_off() > LONGEST_ETCD_LEASE {
            return invalid(
                "max_lease_duration plus twice max_clock_offset must be at most 9,000,000,000 s \
                 (the longest etcd lease, which holds the amnesia hold-off)",
            );
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return invalid("connect_timeout and request_timeout must be positive");
        }
        Ok(())
    }
}

/// Decodes `%XX` escapes (for passwords and prefixes in URLs).
fn percent_decode(text: &str) -> Result<String, EtcdLeaseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Err(EtcdLeaseError::InvalidUrl(format!(
                    "bad %-escape in `{text}`"
                )));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| EtcdLeaseError::InvalidUrl(format!("`{text}` is not UTF-8 once decoded")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use EtcdLeaseError::{InvalidOptions, InvalidUrl};

    #[test]
    fn urls() {
        let o = EtcdOptions::from_url("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(o.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(o.prefix, "/nononce/leases/");
        assert!(o.user.is_none());

        let o = EtcdOptions::from_url("etcd://a:1,b:2,[::1]:3/team/ids").unwrap();
        assert_eq!(o.endpoints, ["http://a:1", "http://b:2", "http://[::1]:3"]);
        assert_eq!(o.prefix, "/team/ids/");

        let o = EtcdOptions::from_url("etcd://me:p%40ss@h:2379/").unwrap();
        assert_eq!(o.user, Some(("me".into(), "p@ss".into())));
        assert_eq!(o.prefix, "/nononce/leases/");

        let o = EtcdOptions::from_url("etcd://h:1/p?max_lease_s=300").unwrap();
        assert_eq!(o.max_lease_duration, Duration::from_secs(300));
        assert_eq!(o.prefix, "/p/");
        let o = EtcdOptions::from_url("etcd://h:1?max_lease_s=60").unwrap();
        assert_eq!(o.prefix, "/nononce/leases/");
        assert_eq!(o.max_lease_duration, Duration::from_secs(60));
        assert_eq!(o.max_clock_offset, DEFAULT_MAX_CLOCK_OFFSET);
        let o = EtcdOptions::from_url("etcd://h:1/p?max_lease_s=300&max_clock_offset_s=5").unwrap();
        assert_eq!(o.max_clock_offset, Duration::from_secs(5));
        assert_eq!(o.amnesia_hold_off(), Duration::from_secs(310));

        for bad in [
            "etcd://h:1?max_lease_s=0",
            "etcd://h:1?max_lease_s=x",
            "etcd://h:1?max_clock_offset_s=-1",
            "etcd://h:1?max_clock_offset_s=18446744073709551615",
            "etcd://h:1?table=t",
            "redis://h:1",
            "etcd://h",
            "etcd://h:x",
            "etcd://:1",
            "etcd://me@h:1",
            "etcd://h:1,",
            "etcd://u:%zz@h:1",
        ] {
            let e = EtcdOptions::from_url(bad).unwrap_err();
            let refused = matches!(e, InvalidUrl(_) | InvalidOptions(_));
            assert!(refused, "{bad}: {e}");
        }
        #[cfg(not(feature = "tls"))]
        assert!(EtcdOptions::from_url("etcds://h:1").is_err());
        #[cfg(feature = "tls")]
        assert_eq!(
            EtcdOptions::from_url("etcds://h:1").unwrap().endpoints,
            ["https://h:1"]
        );
    }

    #[test]
    fn validation() {
        let ok = EtcdOptions::new(["http://h:1"]);
        assert!(ok.validate().is_ok());
        for bad in [
            EtcdOptions::new(Vec::<String>::new()),
            ok.clone().with_prefix(""),
            ok.clone().with_acquire_attempts(0),
            ok.clone()
                .with_max_lease_duration(Duration::from_millis(999)),
            ok.clone()
                .with_max_clock_offset(Duration::from_secs(4_500_000_000)),
            ok.clone().with_request_timeout(Duration::ZERO),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(
            ok.clone()
                .with_max_lease_duration(Duration::from_secs(300))
                .amnesia_hold_off(),
            Duration::from_secs(300 + 2 * 3600)
        );
        let debug = format!("{:?}", EtcdOptions::new(["x"]).with_user("u", "secret"));
        assert!(!debug.contains("secret"), "{debug}");
    }
}
