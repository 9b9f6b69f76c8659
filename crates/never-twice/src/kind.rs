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
        // A nonce of `$call`, its value widened by `$value` (`to_u64` or `to_u128`).
        macro_rules! issued {
            ($call:ident, $value:ident) => {{
                let n = factory.$call()?;
                Issued::new(n.$value().into(), &n.decode(epoch), epoch)
            }};
        }
        Ok(match self {
            Self::Counter64 => issued!(counter64, to_u64),
            Self::Sortable64 => issued!(sortable64, to_u64),
            Self::Counter96 => issued!(counter96, to_u128),
            Self::Sortable96 => issued!(sortable96, to_u128),
            Self::Counter128 => issued!(counter128, to_u128),
            Self::Sortable128 => issued!(sortable128, to_u128),
        })
    }
}
