//! `SandboxError`: the one error type of this crate.

use jianmu_tool_core::BoxError;

/// Why a sandbox could not be set up, reached or kept, or its image built. A call
/// that fails for one of these reasons fails with [`jianmu_tool_core::ToolError::Runner`]
/// carrying this error as its source: an operator's problem, not the model's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A setting, or the workspace, cannot be used.
    #[error("invalid sandbox settings: {0}")]
    Settings(String),
    /// The container engine cannot be reached.
    #[error("sandbox unavailable: cannot reach the Docker daemon at {address}")]
    Unavailable {
        /// The engine's address.
        address: String,
        /// Why it could not be reached.
        #[source]
        source: BoxError,
    },
    /// The sandbox image is not there.
    #[error("sandbox image `{image}` not found; build it with `jianmu sandbox build-image`")]
    MissingImage {
        /// The image asked for.
        image: String,
    },
    /// The engine does not know the runtime the settings ask for.
    #[error(
        "the Docker engine has no runtime `{runtime}`: register it in the engine's daemon.json \
         (\"runtimes\": {{\"{runtime}\": {{\"path\": \"/usr/bin/{runtime}\"}}}}) and restart the engine, \
         or leave `runtime` unset to use the engine's default"
    )]
    MissingRuntime {
        /// The runtime asked for.
        runtime: String,
    },
    /// The engine refused or failed an operation.
    #[error("{what}")]
    Engine {
        /// What was being done.
        what: String,
        /// The engine's answer.
        #[source]
        source: BoxError,
    },
    /// A file for the image could not be read or packed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox stopped, or never became ready; the message says why and what the
    /// next call does.
    #[error("{0}")]
    Lost(String),
}

impl SandboxError {
    /// An engine failure while doing `what`.
    pub(crate) fn engine(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Engine {
            what: what.into(),
            source: source.into(),
        }
    }
}
