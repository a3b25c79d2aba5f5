//! Fault injection for tests: a hook called at each stage of the pipeline, which may return an
//! error or panic. Compiled in only with the `fault-hooks` feature (the integration tests turn
//! it on); without it [`Hooks::check`] is an empty inline function.

/// Where a hook is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// Reading a file's footer.
    Footer,
    /// Fetching a row group's column chunks.
    Fetch,
    /// Decoding a row group (on the blocking pool).
    Decode,
    /// Assembling a batch (the loader's threads).
    Assemble,
}

impl Stage {
    /// The stage's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Footer => "footer",
            Stage::Fetch => "fetch",
            Stage::Decode => "decode",
            Stage::Assemble => "assemble",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A test's fault hook: given the stage and the object (file path), `Err` to fail it (a
/// panic inside the hook panics the stage).
#[cfg(feature = "fault-hooks")]
pub type FaultHook = std::sync::Arc<dyn Fn(Stage, &str) -> Result<(), String> + Send + Sync>;

/// The hooks of a stream or loader (none unless a test set one).
#[derive(Clone, Default)]
pub struct Hooks {
    #[cfg(feature = "fault-hooks")]
    hook: Option<FaultHook>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooks")
    }
}

impl Hooks {
    /// Hooks that call `hook` at every stage.
    #[cfg(feature = "fault-hooks")]
    pub fn new(hook: FaultHook) -> Self {
        Hooks { hook: Some(hook) }
    }

    /// Runs the hook for `stage` on `object`: its error as a message naming both.
    #[inline]
    pub fn check(&self, stage: Stage, object: &str) -> Result<(), String> {
        #[cfg(feature = "fault-hooks")]
        if let Some(hook) = &self.hook {
            return hook(stage, object).map_err(|e| format!("{stage} of {object}: {e}"));
        }
        let _ = (stage, object);
        Ok(())
    }
}
