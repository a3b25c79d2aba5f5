//! The plan's one error: a sampling option that cannot be used ([`crate::sample`]).

/// A sampling option that cannot be used: the option's name (as the Python keyword and the
/// `voxlake bench` flag spell it) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingError {
    option: &'static str,
    message: String,
}

impl SamplingError {
    /// An error for `option` saying `message`.
    pub fn new(option: &'static str, message: impl Into<String>) -> Self {
        SamplingError {
            option,
            message: message.into(),
        }
    }

    /// The option at fault: `balance`, `class_weights`, `weight_column`, `epoch_size`,
    /// `subsample`, `subset_by`, `split`, `splits`, `split_salt`, `sources`, `proportion`,
    /// `repeat`; of patches ([`crate::patch`]): `brick`, `pad` or `overlap`.
    pub fn option(&self) -> &'static str {
        self.option
    }

    /// What is wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for SamplingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.option, self.message)
    }
}

impl std::error::Error for SamplingError {}

/// A weight must be finite and not negative.
pub(crate) fn check_weight(option: &'static str, what: &str, w: f64) -> Result<(), SamplingError> {
    if w.is_finite() && w >= 0.0 {
        Ok(())
    } else {
        Err(SamplingError::new(
            option,
            format!("{what} has weight {w}: weights must be finite and not negative"),
        ))
    }
}
