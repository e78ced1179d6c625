//! `jianmu sandbox build-image`: the Docker sandbox's image, built locally.

use std::path::PathBuf;

use anyhow::Context;
use jianmu_runtime::docker::image;

use crate::settings::Settings;

/// What `build-image` was asked for.
pub(crate) struct Request {
    pub(crate) tag: Option<String>,
    pub(crate) busybox: PathBuf,
    pub(crate) runner: Option<PathBuf>,
    pub(crate) python: Option<PathBuf>,
    pub(crate) no_python: bool,
    pub(crate) verbose: bool,
}

/// Builds the image `command` (a `build-image`) asks for and says what was built.
pub(crate) fn run(
    settings: &Settings,
    command: &crate::args::SandboxCommand,
) -> anyhow::Result<String> {
    let crate::args::SandboxCommand::BuildImage {
        tag,
        busybox,
        runner,
        python,
        no_python,
        verbose,
    } = command
    else {
        anyhow::bail!("not a build-image command");
    };
    let request = Request {
        tag: tag.clone(),
        busybox: busybox.clone(),
        runner: runner.clone(),
        python: python.clone(),
        no_python: *no_python,
        verbose: *verbose,
    };
    let tag = request.tag.unwrap_or_else(|| settings.docker.image.clone());
    let runner = match request.runner {
        Some(path) => path,
        None => std::env::current_exe().context("cannot find this executable")?,
    };
    let mut sources = image::ImageSources::debian(runner);
    sources.busybox = request.busybox;
    if request.no_python {
        sources.python = None;
    } else if request.python.is_some() {
        sources.python = request.python;
    }
    let context = image::image_context(&sources)?;
    if request.verbose {
        eprint!("{}", context.dockerfile);
    }
    // On every engine sessions may be placed on.
    crate::runtime()?.block_on(async {
        for (host, tls) in settings.docker.engines() {
            let docker = image::connect_with(host.as_deref(), tls.as_ref()).await?;
            image::build_image(&docker, &tag, &context).await?;
        }
        Ok::<_, jianmu_runtime::SandboxError>(())
    })?;
    Ok(format!(
        "built {tag} ({} MB of files, digest {})\n",
        context.tar.len() / 1_000_000,
        context.digest
    ))
}
