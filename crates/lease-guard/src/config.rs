//! Guard settings and errors.

use std::net::SocketAddr;
use std::time::Duration;

/// Where the guard listens, whom it asks to join, and how patiently it waits for answers.
///
/// Every node of one fleet should list the same seeds (listing itself is fine). One seed that is
/// up is enough to join; the others are learnt by gossip.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardConfig {
    /// The UDP address to bind (port 0 picks a free port).
    pub(crate) bind: SocketAddr,
    /// The address peers reach this node at; defaults to the bound address, and is required
    /// when binding to an unspecified address such as `0.0.0.0`.
    pub(crate) advertise: Option<SocketAddr>,
    /// Nodes to join through.
    pub(crate) seeds: Vec<SocketAddr>,
    /// How long to wait for a peer's answer before asking again (default 300 ms).
    pub(crate) answer_timeout: Duration,
    /// How many times to ask a peer before giving up on it (default 10). A peer that never
    /// answers is presumed gone: gossip alone never stops a node.
    pub(crate) attempts: u32,
    /// How often to announce to the seeds while no peer is known (default 1 s); once in a
    /// cluster, every 30 times this, which also heals partitions.
    pub(crate) rejoin_interval: Duration,
    /// The expected number of nodes, used to tune gossip fan-out and failure detection
    /// (default 32).
    pub(crate) cluster_size: u32,
}

impl GuardConfig {
    /// Defaults, listening on `bind`.
    #[must_use]
    pub const fn new(bind: SocketAddr) -> Self {
        Self {
            bind,
            advertise: None,
            seeds: Vec::new(),
            answer_timeout: Duration::from_millis(300),
            attempts: 10,
            rejoin_interval: Duration::from_secs(1),
            cluster_size: 32,
        }
    }

    /// Sets the address peers reach this node at.
    #[must_use]
    pub const fn with_advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// Sets the seed nodes.
    #[must_use]
    pub fn with_seeds(mut self, seeds: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.seeds = seeds.into_iter().collect();
        self
    }

    /// Sets how long to wait for a peer's answer before asking again.
    #[must_use]
    pub const fn with_answer_timeout(mut self, timeout: Duration) -> Self {
        self.answer_timeout = timeout;
        self
    }

    /// Sets how many times a peer is asked before the guard gives up on it.
    #[must_use]
    pub const fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets how often to announce to the seeds while alone.
    #[must_use]
    pub const fn with_rejoin_interval(mut self, interval: Duration) -> Self {
        self.rejoin_interval = interval;
        self
    }

    /// Sets the expected number of nodes.
    #[must_use]
    pub const fn with_cluster_size(mut self, nodes: u32) -> Self {
        self.cluster_size = nodes;
        self
    }

    /// The UDP address to bind.
    #[must_use]
    pub const fn bind(&self) -> SocketAddr {
        self.bind
    }

    /// The address peers reach this node at, if set (otherwise the bound address).
    #[must_use]
    pub const fn advertise(&self) -> Option<SocketAddr> {
        self.advertise
    }

    /// The seed nodes.
    #[must_use]
    pub fn seeds(&self) -> &[SocketAddr] {
        &self.seeds
    }

    /// How long to wait for a peer's answer before asking again.
    #[must_use]
    pub const fn answer_timeout(&self) -> Duration {
        self.answer_timeout
    }

    /// How many times a peer is asked before the guard gives up on it.
    #[must_use]
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How often to announce to the seeds while alone.
    #[must_use]
    pub const fn rejoin_interval(&self) -> Duration {
        self.rejoin_interval
    }

    /// The expected number of nodes.
    #[must_use]
    pub const fn cluster_size(&self) -> u32 {
        self.cluster_size
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`GuardError::Setting`] naming the first invalid setting, or
    /// [`GuardError::NoAdvertiseAddress`].
    pub fn validate(&self) -> Result<(), GuardError> {
        let out_of_range = [
            (
                "answer_timeout",
                self.answer_timeout.is_zero(),
                "above zero",
            ),
            (
                "rejoin_interval",
                self.rejoin_interval.is_zero(),
                "above zero",
            ),
            ("attempts", self.attempts == 0, "at least 1"),
            ("cluster_size", self.cluster_size == 0, "at least 1"),
            (
                "advertise",
                self.advertise
                    .is_some_and(|a| a.ip().is_unspecified() || a.port() == 0),
                "an address with a specific IP and port",
            ),
        ];
        if let Some(&(name, _, rule)) = out_of_range.iter().find(|(_, bad, _)| *bad) {
            return Err(GuardError::Setting { name, rule });
        }
        if self.advertise.is_none() && self.bind.ip().is_unspecified() {
            return Err(GuardError::NoAdvertiseAddress { bind: self.bind });
        }
        Ok(())
    }
}

/// Why the guard could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// A setting is out of range.
    #[error("conflict guard setting `{name}` must be {rule}; fix the guard configuration")]
    Setting {
        /// The setting.
        name: &'static str,
        /// What it must be.
        rule: &'static str,
    },
    /// Bound to `0.0.0.0` or `[::]` without saying where peers reach this node.
    #[error(
        "the conflict guard binds to the unspecified address {bind}; set an advertise address \
         that peers can reach this node at"
    )]
    NoAdvertiseAddress {
        /// The bind address.
        bind: SocketAddr,
    },
    /// The UDP socket could not be bound.
    #[error("cannot bind the conflict guard to udp {addr}; choose a free port or another address")]
    Bind {
        /// The bind address.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str) -> GuardConfig {
        GuardConfig::new(addr.parse().unwrap())
    }

    #[test]
    fn defaults_are_valid_on_a_specific_address() {
        at("127.0.0.1:0").validate().unwrap();
        at("0.0.0.0:4950")
            .with_advertise("10.0.0.5:4950".parse().unwrap())
            .validate()
            .unwrap();
    }

    #[test]
    fn rejects_bad_settings_with_their_name() {
        let err = at("0.0.0.0:4950").validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "the conflict guard binds to the unspecified address 0.0.0.0:4950; set an advertise \
             address that peers can reach this node at"
        );
        let err = at("127.0.0.1:0")
            .with_answer_timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "conflict guard setting `answer_timeout` must be above zero; fix the guard \
             configuration"
        );
        for (name, config) in [
            ("attempts", at("127.0.0.1:0").with_attempts(0)),
            ("cluster_size", at("127.0.0.1:0").with_cluster_size(0)),
            (
                "rejoin_interval",
                at("127.0.0.1:0").with_rejoin_interval(Duration::ZERO),
            ),
            (
                "advertise",
                at("0.0.0.0:1").with_advertise("0.0.0.0:1".parse().unwrap()),
            ),
        ] {
            let err = config.validate().unwrap_err();
            assert!(
                matches!(err, GuardError::Setting { name: setting, .. } if setting == name),
                "{name}: {err}"
            );
        }
    }
}
