//! The kinds of base nonce (counter, sortable) and what a generating call claims of them.
//!
//! Counter and sortable nonces of one size share one layout, so a factory issues one kind per
//! size; and an encrypted nonce can equal a plain one of its size, so it issues one form per
//! size too. A factory keeps its claims in one word, laid out here: two bits per base size for
//! the kind, then one bit per returned size and form.

/// A kind of base nonce: counter or sortable. Encrypted nonces are made from one.
///
/// A factory issues one kind per size (see [`Error::KindConflict`](crate::Error::KindConflict)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Base {
    /// A counter nonce: fastest; its timestamp is the counter's, not the creation time.
    #[default]
    Counter,
    /// A sortable nonce: its timestamp is the creation time.
    Sortable,
}

/// What a generating call claims in `Factory::kinds`: a base size with its kind, and the size
/// of what the call returns with whether it is encrypted (its form).
#[derive(Clone, Copy)]
pub(crate) struct Kind {
    /// The base size in bits: 64, 96 or 128.
    pub(crate) bits: u16,
    pub(crate) base: Base,
    /// The size of the nonce the call returns: the base's, or the cipher's block for
    /// `encrypted96` with Blowfish or 3DES (a 64-bit base, a 96-bit nonce).
    pub(crate) out_bits: u16,
    pub(crate) encrypted: bool,
}

/// Where the form bits start in the kinds word: per returned size, one bit for plain nonces
/// and the next for encrypted ones, after the base kinds' two bits per size.
const FORM_SHIFT: u32 = 6;

/// Both form bits of every size: plain and encrypted nonces allowed side by side
/// ([`FactoryConfig::with_plain_and_encrypted`](crate::FactoryConfig::with_plain_and_encrypted)).
pub(crate) const ALL_FORMS: u64 = 0b11_1111 << FORM_SHIFT;

const fn size_index(bits: u16) -> u32 {
    match bits {
        64 => 0,
        96 => 1,
        _ => 2,
    }
}

impl Kind {
    pub(crate) const COUNTER64: Self = Self::new(64, Base::Counter);
    pub(crate) const SORTABLE64: Self = Self::new(64, Base::Sortable);
    pub(crate) const COUNTER96: Self = Self::new(96, Base::Counter);
    pub(crate) const SORTABLE96: Self = Self::new(96, Base::Sortable);
    pub(crate) const COUNTER128: Self = Self::new(128, Base::Counter);
    pub(crate) const SORTABLE128: Self = Self::new(128, Base::Sortable);
    /// The base of encrypted 128-bit counter nonces.
    pub(crate) const ENCRYPTED_COUNTER128: Self = Self::COUNTER128.encrypted(128);

    /// A plain nonce of `bits` bits of kind `base`.
    pub(crate) const fn new(bits: u16, base: Base) -> Self {
        Self {
            bits,
            base,
            out_bits: bits,
            encrypted: false,
        }
    }

    /// This base, encrypted into a nonce of `out_bits` bits.
    pub(crate) const fn encrypted(self, out_bits: u16) -> Self {
        Self {
            out_bits,
            encrypted: true,
            ..self
        }
    }

    const fn shift(self) -> u32 {
        2 * size_index(self.bits)
    }

    /// The bits of the kinds word that hold this base size's kind.
    pub(crate) const fn base_mask(self) -> u64 {
        3 << self.shift()
    }

    /// The bits of the kinds word once this base size is claimed for this kind.
    pub(crate) const fn base_value(self) -> u64 {
        let code = match self.base {
            Base::Counter => 1,
            Base::Sortable => 2,
        };
        code << self.shift()
    }

    /// The bit of the kinds word that allows this form (plain or encrypted) at this returned
    /// size.
    pub(crate) const fn form_bit(self) -> u64 {
        1 << (FORM_SHIFT + 2 * size_index(self.out_bits) + self.encrypted as u32)
    }

    /// The bit of the other form at this returned size.
    pub(crate) const fn other_form_bit(self) -> u64 {
        1 << (FORM_SHIFT + 2 * size_index(self.out_bits) + !self.encrypted as u32)
    }

    /// The bits of the kinds word a call of this kind checks: the base size's kind and the
    /// form at the returned size.
    #[inline]
    pub(crate) const fn mask(self) -> u64 {
        self.base_mask() | self.form_bit()
    }

    /// The bits under [`mask`](Self::mask) once this kind is claimed.
    #[inline]
    pub(crate) const fn value(self) -> u64 {
        self.base_value() | self.form_bit()
    }

    /// The kind recorded in `word` for this base size, if any.
    pub(crate) const fn locked_in(self, word: u64) -> Option<Base> {
        match (word >> self.shift()) & 3 {
            0 => None,
            1 => Some(Base::Counter),
            _ => Some(Base::Sortable),
        }
    }
}
