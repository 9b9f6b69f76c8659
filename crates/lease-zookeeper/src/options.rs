//! [`ZooKeeperOptions`]: which ensemble, which root, and the session's timing.

use std::time::Duration;

use crate::error::ZooKeeperLeaseError;
use crate::paths::{DEFAULT_ROOT, valid_root};

/// Settings of a [`ZooKeeperStrategy`](crate::ZooKeeperStrategy).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `hosts` | (given) | the ensemble's `host:port` list, comma-separated |
/// | `root` | `/nononce` | the znode everything lives under; one root per deployment |
/// | `session_timeout` | 40 s | the session timeout asked of the ensemble (its `maxSessionTimeout`, 20 ticks = 40 s by default, caps it) |
/// | `max_session_timeout` | 40 s | the longest session timeout any node of this root uses |
/// | `max_clock_offset` | 1 h | the largest offset between two nodes' clocks; with the longest session, the amnesia hold-off (`max_session_timeout + 2 × max_clock_offset`) |
/// | `acquire_attempts` | 3 | claims tried per acquire before `Conflict` |
/// | `connect_timeout` | 10 s | longest wait for a session |
/// | `request_timeout` | 5 s | longest wait for one request's answer |
#[derive(Clone, PartialEq, Eq)]
pub struct ZooKeeperOptions {
    pub(crate) hosts: String,
    pub(crate) root: String,
    pub(crate) session_timeout: Duration,
    pub(crate) max_session_timeout: Duration,
    pub(crate) max_clock_offset: Duration,
    pub(crate) acquire_attempts: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl std::fmt::Debug for ZooKeeperOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperOptions")
            .field("hosts", &self.hosts)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("max_session_timeout", &self.max_session_timeout)
            .field("max_clock_offset", &self.max_clock_offset)
            .field("acquire_attempts", &self.acquire_attempts)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// ZooKeeper's default `maxSessionTimeout`: 20 ticks of its default 2 s.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(40);

/// The largest offset between two nodes' clocks the amnesia hold-off allows for, by default.
const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);

const URL_FORM: &str = "use zk://host:port[,host:port...][/root][?session_timeout_s=N&max_session_timeout_s=N&max_clock_offset_s=N]";

impl ZooKeeperOptions {
    /// The defaults (see the table above) for the ensemble at `hosts` (`"zk1:2181,zk2:2181"`).
    #[must_use]
    pub fn new(hosts: impl Into<String>) -> Self {
        Self {
            hosts: hosts.into(),
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
            acquire_attempts: 3,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
        }
    }

    /// Options from a store URL:
    /// `zk://host:port[,host:port...][/root][?session_timeout_s=N&max_session_timeout_s=N&max_clock_offset_s=N]`.
    /// A path sets the root znode (default `/nononce`); `session_timeout_s`,
    /// `max_session_timeout_s` and `max_clock_offset_s` set
    /// [`with_session_timeout`](Self::with_session_timeout),
    /// [`with_max_session_timeout`](Self::with_max_session_timeout) (which follows the first
    /// when only that is given) and [`with_max_clock_offset`](Self::with_max_clock_offset); any
    /// other option is refused by name.
    ///
    /// # Errors
    /// [`ZooKeeperLeaseError::InvalidUrl`] naming what is wrong.
    pub fn from_url(url: &str) -> Result<Self, ZooKeeperLeaseError> {
        let invalid = |why: &str| {
            Err(ZooKeeperLeaseError::InvalidUrl(format!(
                "{why}: {URL_FORM}"
            )))
        };
        let Some(rest) = url.strip_prefix("zk://") else {
            return invalid("not a zk:// url");
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if hosts.contains('@') {
            return invalid("credentials in the url are not supported");
        }
        for host in hosts.split(',') {
            let Some((name, port)) = host.rsplit_once(':') else {
                return invalid(&format!("host `{host}` has no port"));
            };
            if name.is_empty() || port.parse::<u16>().is_err() {
                return invalid(&format!("host `{host}` is not host:port"));
            }
        }
        let mut options = Self::new(hosts);
        if !path.is_empty() && path != "/" {
            let root = path.strip_suffix('/').unwrap_or(path);
            valid_root(root)
                .map_err(|why| ZooKeeperLeaseError::InvalidUrl(format!("{why}: {URL_FORM}")))?;
            options = options.with_root(root);
        }
        let mut max_given = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Ok(seconds) = value.parse::<u64>() else {
                return invalid(&format!("{name}={value} is not whole seconds"));
            };
            let seconds = Duration::from_secs(seconds);
            match name {
                "session_timeout_s" => {
                    options.session_timeout = seconds;
                    if !max_given {
                        options.max_session_timeout = options.max_session_timeout.max(seconds);
                    }
                }
                "max_session_timeout_s" => {
                    options.max_session_timeout = seconds;
                    max_given = true;
                }
                "max_clock_offset_s" => options.max_clock_offset = seconds,
                other => {
                    return invalid(&format!(
                        "unknown option `{other}` (known: session_timeout_s, max_session_timeout_s, max_clock_offset_s)"
                    ));
                }
            }
        }
        options.validate()?;
        Ok(options)
    }

    /// Sets the root znode (default `/nononce`). Every node of a deployment must use the same
    /// root; different roots are independent sets of 512 IDs.
    #[must_use]
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// Sets the session timeout asked of the ensemble (default 40 s). The ensemble grants one
    /// between its `minSessionTimeout` and `maxSessionTimeout` (2 and 20 ticks: 4 s and 40 s by
    /// default); leases last three quarters of what it grants.
    #[must_use]
    pub const fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets the longest session timeout any node of this root uses (default 40 s): the longest
    /// lease, which the amnesia hold-off outlasts. A session granted more is refused.
    #[must_use]
    pub const fn with_max_session_timeout(mut self, timeout: Duration) -> Self {
        self.max_session_timeout = timeout;
        self
    }

    /// Sets the largest offset between two nodes' clocks the amnesia hold-off allows for
    /// (default 1 h): after the root lost its floors, a successor's clock must be past every
    /// timestamp a forgotten holder issued.
    #[must_use]
    pub const fn with_max_clock_offset(mut self, offset: Duration) -> Self {
        self.max_clock_offset = offset;
        self
    }

    /// How long acquisition holds off after the root was found without its initialization
    /// marker or the ensemble went back in time: `max_session_timeout + 2 × max_clock_offset`
    /// ([`lease_core::time::amnesia_hold_off`]).
    #[must_use]
    pub const fn amnesia_hold_off(&self) -> Duration {
        lease_core::time::amnesia_hold_off(self.max_session_timeout, self.max_clock_offset)
    }

    /// The largest clock offset between nodes allowed for.
    #[must_use]
    pub const fn max_clock_offset(&self) -> Duration {
        self.max_clock_offset
    }

    /// Sets how many claims an acquire tries before it answers `Conflict` (default 3).
    #[must_use]
    pub const fn with_acquire_attempts(mut self, attempts: u32) -> Self {
        self.acquire_attempts = attempts;
        self
    }

    /// Sets the longest wait for a session (default 10 s).
    #[must_use]
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the longest wait for one request's answer (default 5 s).
    #[must_use]
    pub const fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The ensemble's `host:port` list.
    #[must_use]
    pub fn hosts(&self) -> &str {
        &self.hosts
    }

    /// The root znode.
    #[must_use]
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The session timeout asked for.
    #[must_use]
    pub const fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The longest session timeout of any node of this root.
    #[must_use]
    pub const fn max_session_timeout(&self) -> Duration {
        self.max_session_timeout
    }

    /// Claims per acquire.
    #[must_use]
    pub const fn acquire_attempts(&self) -> u32 {
        self.acquire_attempts
    }

    /// The longest wait for a session.
    #[must_use]
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The longest wait for one answer.
    #[must_use]
    pub const fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ZooKeeperLeaseError::InvalidOptions`] naming the setting to change.
    pub fn validate(&self) -> Result<(), ZooKeeperLeaseError> {
        let invalid = |why: String| Err(ZooKeeperLeaseError::InvalidOptions(why));
        if self.hosts.is_empty() {
            return invalid("at least one host:port is needed".to_owned());
        }
        if let Err(why) = valid_root(&self.root) {
            return invalid(why);
        }
        if self.acquire_attempts == 0 {
            return invalid("acquire_attempts must be at least 1".to_owned());
        }
        if self.session_timeout < Duration::from_secs(1) {
            return invalid("session_timeout must be at least 1 s".to_owned());
        }
        if self.session_timeout > self.max_session_timeout {
            return invalid(format!(
                "session_timeout ({:?}) is above max_session_timeout ({:?}), the hold-off that must outlast every session of this root: raise max_session_timeout",
                self.session_timeout, self.max_session_timeout
            ));
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return invalid("connect_timeout and request_timeout must be positive".to_owned());
        }
        Ok(())
    }
}

/// The TTL a lease on a session of `timeout` is granted: three quarters of it, counted (by the
/// lease manager) from when the request that proved the session alive was sent.
///
/// ZooKeeper ends a session when its leader has heard nothing of it for the session timeout.
/// The leader hears of a request to a follower at the follower's next report, at most half a tick
/// later, and the ensemble grants at least two ticks (`minSessionTimeout`): the report lags by at
/// most a quarter of the timeout. So a session whose request was sent at `t` lives at least
/// until `t + 3/4 timeout` on the leader's clock.
///
/// ```
/// # use std::time::Duration;
/// use lease_zookeeper::granted_ttl;
/// assert_eq!(granted_ttl(Duration::from_secs(40)), Duration::from_secs(30));
/// ```
#[must_use]
pub fn granted_ttl(timeout: Duration) -> Duration {
    timeout * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use ZooKeeperLeaseError::{InvalidOptions, InvalidUrl};

    #[test]
    fn urls() {
        let o = ZooKeeperOptions::from_url("zk://127.0.0.1:2181").unwrap();
        assert_eq!(o.hosts(), "127.0.0.1:2181");
        assert_eq!(o.root(), "/nononce");
        assert_eq!(o.session_timeout(), Duration::from_secs(40));

        let o = ZooKeeperOptions::from_url("zk://a:1,b:2/team/ids/").unwrap();
        assert_eq!(o.hosts(), "a:1,b:2");
        assert_eq!(o.root(), "/team/ids");

        let o = ZooKeeperOptions::from_url("zk://a:1/?session_timeout_s=60").unwrap();
        assert_eq!(o.session_timeout(), Duration::from_secs(60));
        assert_eq!(o.max_session_timeout(), Duration::from_secs(60));
        let o = ZooKeeperOptions::from_url(
            "zk://a:1?session_timeout_s=10&max_session_timeout_s=90&max_clock_offset_s=5",
        )
        .unwrap();
        assert_eq!(o.session_timeout(), Duration::from_secs(10));
        assert_eq!(o.max_session_timeout(), Duration::from_secs(90));
        assert_eq!(o.amnesia_hold_off(), Duration::from_secs(100));
        let o = ZooKeeperOptions::from_url("zk://a:1").unwrap();
        assert_eq!(o.amnesia_hold_off(), Duration::from_secs(40 + 2 * 3600));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("etcd://a:1", "not a zk:// url"),
            ("zk://a", "has no port"),
            ("zk://a:x", "is not host:port"),
            ("zk://u:p@a:1", "credentials"),
            ("zk://a:1/x//y", "empty segment"),
            ("zk://a:1?ttl=3", "unknown option `ttl`"),
            ("zk://a:1?session_timeout_s=x", "is not whole seconds"),
        ] {
            match ZooKeeperOptions::from_url(url) {
                Err(InvalidUrl(why)) => {
                    assert!(why.contains(says), "{url}: {why}");
                    assert!(why.contains("use zk://"), "{url}: {why}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        match ZooKeeperOptions::from_url("zk://a:1?session_timeout_s=90&max_session_timeout_s=40") {
            Err(InvalidOptions(why)) => assert!(why.contains("raise max_session_timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
