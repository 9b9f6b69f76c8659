//! The six kinds and sizes of plain nonces, the series the judgement keeps apart.

use nonce_core::{Clock, Error, Factory};

use crate::Issued;

/// One nonce kind and size: values of two kinds may be equal, values of one kind may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `Factory::counter64`.
    Counter64,
    /// `Factory::sortable64`.
    Sortable64,
    /// `Factory::counter96`.
    Counter96,
    /// `Factory::sortable96`.
    Sortable96,
    /// `Factory::counter128`.
    Counter128,
    /// `Factory::sortable128`.
    Sortable128,
}

impl Kind {
    /// Its name, as the factory's method.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Counter64 => "counter64",
            Self::Sortable64 => "sortable64",
            Self::Counter96 => "counter96",
            Self::Sortable96 => "sortable96",
            Self::Counter128 => "counter128",
            Self::Sortable128 => "sortable128",
        }
    }

    /// One nonce of this kind from `factory`, as the judgement sees it.
    ///
    /// # Errors
    /// The factory's refusal.
    pub fn generate<C: Clock>(self, factory: &Factory<C>) -> Result<Issued, Error> {
        let epoch = factory.epoch_ms();
        Ok(match self {
            Self::Counter64 => {
                let n = factory.counter64()?;
                Issued::new(u128::from(n.to_u64()), &n.decode(epoch), epoch)
            }
            Self::Sortable64 => {
                let n = factory.sortable64()?;
                Issued::new(u128::from(n.to_u64()), &n.decode(epoch), epoch)
            }
            Self::Counter96 => {
                let n = factory.counter96()?;
                Issued::new(n.to_u128(), &n.decode(epoch), epoch)
            }
            Self::Sortable96 => {
                let n = factory.sortable96()?;
                Issued::new(n.to_u128(), &n.decode(epoch), epoch)
            }
            Self::Counter128 => {
                let n = factory.counter128()?;
                Issued::new(n.to_u128(), &n.decode(epoch), epoch)
            }
            Self::Sortable128 => {
                let n = factory.sortable128()?;
                Issued::new(n.to_u128(), &n.decode(epoch), epoch)
            }
        })
    }
}
