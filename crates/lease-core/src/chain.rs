//! An error and its sources on one line: how failure reasons and the messages backends
//! compose for users say an error.

/// An error and its sources on one line, `: `-separated, each cause said once: many errors
/// already quote their source in their own message, and a cause whose text an earlier part
/// contains is left out. Empty messages are left out too.
///
/// ```
/// use lease_core::error_chain;
///
/// #[derive(Debug)]
/// struct Connect(std::io::Error);
/// impl std::fmt::Display for Connect {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "cannot connect: {}", self.0) // quotes its source
///     }
/// }
/// impl std::error::Error for Connect {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let error = Connect(std::io::Error::other("connection refused"));
/// assert_eq!(error_chain(&error), "cannot connect: connection refused");
/// ```
#[must_use]
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    error_chain_with(error, |_| None)
}

/// [`error_chain`], with `own_words` saying some errors of the chain its own way: for each
/// error, from the outermost, `Some(text)` says `text` instead of the error's message *and its
/// sources* (the chain ends there), `None` says the message and goes on to the source. Used to
/// shorten an error whose sources only repeat it in more detail (a database error and the
/// server's own source line, say).
#[must_use]
pub fn error_chain_with(
    error: &(dyn std::error::Error + 'static),
    mut own_words: impl FnMut(&(dyn std::error::Error + 'static)) -> Option<String>,
) -> String {
    match own_words(error) {
        Some(text) => join_chain(text, None, &mut own_words),
        None => join_chain(error.to_string(), error.source(), &mut own_words),
    }
}

/// `first`, then each error from `next` down the source chain, each said once.
fn join_chain(
    first: String,
    mut next: Option<&(dyn std::error::Error + 'static)>,
    own_words: &mut dyn FnMut(&(dyn std::error::Error + 'static)) -> Option<String>,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut say = |text: String| {
        if !text.is_empty() && !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
    };
    say(first);
    while let Some(error) = next {
        if let Some(text) = own_words(error) {
            say(text);
            break;
        }
        say(error.to_string());
        next = error.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use core::fmt;

    use super::*;

    /// An error with a message and an optional source, quoting it or not.
    #[derive(Debug)]
    struct Layer {
        message: &'static str,
        quotes_source: bool,
        source: Option<Box<Layer>>,
    }

    impl Layer {
        fn new(message: &'static str, quotes_source: bool, source: Option<Layer>) -> Self {
            Self {
                message,
                quotes_source,
                source: source.map(Box::new),
            }
        }
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.message)?;
            match &self.source {
                Some(source) if self.quotes_source => write!(f, ": {source}"),
                _ => Ok(()),
            }
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source.as_deref().map(|s| s as _)
        }
    }

    /// `renew failed: cannot connect: connection refused`, where `cannot connect` quotes
    /// `connection refused` and `renew failed` quotes neither.
    fn repeated_cause() -> Layer {
        let refused = Layer::new("connection refused", false, None);
        let connect = Layer::new("cannot connect", true, Some(refused));
        Layer::new("renew failed", false, Some(connect))
    }

    #[test]
    fn every_cause_is_said_and_each_only_once() {
        let expected = "renew failed: cannot connect: connection refused";
        assert_eq!(error_chain(&repeated_cause()), expected);
        let c = Layer::new("c", false, None);
        let b = Layer::new("b", false, Some(c));
        let a = Layer::new("a", false, Some(b));
        assert_eq!(error_chain(&a), "a: b: c");
        let empty = Layer::new("", false, Some(Layer::new("cause", false, None)));
        assert_eq!(error_chain(&empty), "cause");
    }

    #[test]
    fn own_words_replace_an_error_and_its_sources() {
        let shortened = error_chain_with(&repeated_cause(), |e| {
            (e.to_string().starts_with("cannot connect")).then(|| "unreachable".to_owned())
        });
        assert_eq!(shortened, "renew failed: unreachable");
        let outermost = error_chain_with(&repeated_cause(), |_| Some("all of it".to_owned()));
        assert_eq!(outermost, "all of it");
    }
}
