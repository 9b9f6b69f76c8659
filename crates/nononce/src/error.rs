/// Why nononce could not start. Nothing was generated and no lease is held when this is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A factory's configuration is invalid (key length, epoch, cipher).
    #[error("factory `{name}` is misconfigured")]
    Factory {
        /// The factory's name.
        name: String,
        /// What is wrong.
        #[source]
        source: nonce_core::FactoryConfigError,
    },
    /// Two factories were given the same name.
    #[error("factory name `{0}` is used twice: give each factory its own name")]
    DuplicateFactory(String),
    /// No factory was configured.
    #[error("no factory configured: add one with `Builder::with_factory`")]
    NoFactory,
    /// The factories' clock could not start its ticker thread (the operating system refused
    /// a thread).
    #[error("could not start the clock's ticker thread")]
    Clock(#[source] std::io::Error),
    /// The lease manager could not start (invalid timing, or no lease in time).
    #[error("could not start the machine-id lease")]
    Lease(#[from] lease_manager::StartError),
    /// The conflict guard could not start (bad settings, or its UDP port is taken). The lease
    /// has been released again.
    #[cfg(feature = "guard")]
    #[cfg_attr(docsrs, doc(cfg(feature = "guard")))]
    #[error("could not start the conflict guard")]
    Guard(#[source] lease_guard::GuardError),
}
