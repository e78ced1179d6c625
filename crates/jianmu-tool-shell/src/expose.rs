//! `expose_port`: a server a command started inside the session's private network,
//! reachable from the host at `127.0.0.1:N` through a relay jianmu holds.

use std::sync::Arc;

use jianmu_tool_core::{CallContext, Structured, Tool, ToolConfig, ToolError, ToolHandle};
use serde::{Deserialize, Serialize};

use crate::{Bash, BashSettings};

/// Arguments of `expose_port`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExposeArgs {
    /// The port the server listens on inside the session (on 127.0.0.1 or all
    /// addresses).
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Close what an earlier call opened for this port.
    #[serde(default)]
    pub close: bool,
}

/// What `expose_port` answers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Exposed {
    /// The port inside the session.
    pub port: u16,
    /// Where the host reaches it (`http://127.0.0.1:N/` for a web server), or `null`
    /// once closed.
    pub url: Option<String>,
    /// Whether it is open now.
    pub open: bool,
}

/// The `expose_port` tool.
#[derive(Debug, Clone)]
pub struct ExposePort {
    network: Arc<jianmu_process::Network>,
    door: Arc<jianmu_egress::Door>,
    /// Whether `bash` runs in a private network here (else its servers are on the
    /// host's already).
    private: bool,
    /// Running inside a Docker sandbox's container, whose loopback the host does not
    /// reach.
    in_container: bool,
}

impl Tool for ExposePort {
    type Args = ExposeArgs;
    type Output = Structured<Exposed>;
    type Error = ToolError;

    const NAME: &'static str = "expose_port";

    const DESCRIPTION: &'static str = "Makes a server that a command of this session started (e.g. a \
     `background: true` bash job listening on 127.0.0.1:PORT) reachable from the user's machine, \
     and answers with its URL there (127.0.0.1 with another port). It stays open until the \
     session ends or `expose_port {port, close: true}`. Start the server first; nothing is \
     opened to other hosts.";

    const EFFECTS: &'static [&'static str] = &["network"];

    async fn call(
        &self,
        args: ExposeArgs,
        _cx: &CallContext,
    ) -> Result<Structured<Exposed>, ToolError> {
        let port = args.port;
        if port == 0 {
            return Err(ToolError::failed("port must be from 1 to 65535"));
        }
        if self.in_container {
            return Err(ToolError::failed(
                "expose_port is not available in the Docker sandbox: the container's servers \
                 are on its own loopback, which the host does not reach; use the local sandbox \
                 for servers the user opens",
            ));
        }
        if !self.private {
            let url = format!("http://127.0.0.1:{port}/");
            let out = Exposed {
                port,
                url: Some(url.clone()),
                open: true,
            };
            return Ok(Structured::new(
                format!(
                    "commands here use the host's network: port {port} is already reachable at {url}"
                ),
                out,
            ));
        }
        if args.close {
            let out = Exposed {
                port,
                url: None,
                open: false,
            };
            let text = match self.door.unexpose(port) {
                Some(addr) => format!("closed 127.0.0.1:{} (port {port})", addr.port()),
                None => format!("port {port} was not exposed"),
            };
            return Ok(Structured::new(text, out));
        }
        let network = self.network.clone();
        let door = self.door.clone();
        let addr = tokio::task::spawn_blocking(move || {
            let inside = network.inside()?;
            door.expose(&inside, port)
        })
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?
        .map_err(|e| ToolError::failed(format!("cannot expose port {port}: {e}")))?;
        let url = format!("http://{addr}/");
        let out = Exposed {
            port,
            url: Some(url.clone()),
            open: true,
        };
        Ok(Structured::new(
            format!(
                "port {port} of this session is reachable from the host at {url} (expose_port {{\"port\": {port}, \"close\": true}} closes it)"
            ),
            out,
        ))
    }
}

fn build(config: &ToolConfig) -> Result<ToolHandle, ToolError> {
    let settings: BashSettings = config.settings(Bash::NAME).unwrap_or_default();
    let isolation = &settings.isolation;
    let kernel = jianmu_process::Isolation::probe();
    let private = !isolation.network
        && isolation.mode != jianmu_process::IsolationMode::Off
        && kernel.namespaces
        && kernel.private_network;
    ToolHandle::new(ExposePort {
        network: config.scope().get::<jianmu_process::Network>(),
        door: config.scope().get::<jianmu_egress::Door>(),
        private,
        in_container: config
            .raw_settings(ExposePort::NAME)
            .and_then(|s| s.get("in_container"))
            .and_then(serde_json::Value::as_bool)
            == Some(true),
    })
}

jianmu_tool_core::register_tool!(ExposePort, build);
