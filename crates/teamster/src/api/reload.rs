//! Reloading `switch.toml` on SIGHUP (`systemctl reload teamster`, `ExecReload`): the file is
//! read and checked whole, and the difference from the running switch (ports added, removed or
//! changed; NetIOC controls, classes and pools; teaming policies and failover orders;
//! administrative states) is applied as one change, under the API's configuration lock, so it
//! is serialised with the API's changes and the port rules'. What a running switch cannot
//! change (see [`crate::live::service::reloaded`]) refuses the whole reload, as does any error
//! in the file: nothing changes, and the event log and standard error say why. The file is not
//! rewritten. A file edited from a copy older than the daemon's last save (the revision in its
//! header, see [`crate::live::persist::KeptFile::reload`]) is refused too: the reload would
//! undo the changes made through the API since, without a word. The libvirt hook's ports are
//! kept: they are not the file's.

use super::routes::{apply, check_running};
use super::ApiState;
use crate::live::config::{parse_file, revision_of};
use crate::live::service;

/// Reloads on every SIGHUP until the process ends.
pub async fn run(state: ApiState) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        eprintln!("teamster: cannot handle SIGHUP: reloads are off");
        return;
    };
    while hup.recv().await.is_some() {
        service::reloading();
        let outcome = reload(&state).await;
        let line = match &outcome {
            Ok(what) => format!("reloaded {}: {what}", state.config_path.display()),
            Err(e) => format!("reload of {} refused: {e}", state.config_path.display()),
        };
        eprintln!("teamster: {line}");
        service::ready(&line);
    }
}

/// Reads, checks and applies the file; says what changed, or why nothing did.
async fn reload(state: &ApiState) -> Result<String, String> {
    let mut config = state.config.lock().await;
    let path = state.config_path.clone();
    let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot read it: {e}"))?;
    let revision = revision_of(&text);
    let outcome = (state.files.lock().unwrap_or_else(|e| e.into_inner()).config)
        .reload(&text, revision)
        .and_then(|()| parse_file(&text))
        .and_then(|f| service::reloaded(&config, f))
        .and_then(|new| {
            let plan = check_running(state, &new)?;
            Ok((new, plan))
        });
    let (new, plan) = match outcome {
        Ok(x) => x,
        Err(e) => {
            apply(state, None, vec![format!("reload refused: {e}")]).await;
            return Err(e);
        }
    };
    let names = |f: &crate::live::config::SwitchFile| f.ports.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    let (old, now) = (names(&config), names(&new));
    let added = now.iter().filter(|n| !old.contains(n)).count();
    let removed = old.iter().filter(|n| !now.contains(n)).count();
    let what = format!("{added} ports added, {removed} removed, {} in all", now.len());
    if apply(state, Some(plan), vec![format!("switch.toml reloaded: {what}")])
        .await
        .is_some()
    {
        *config = new;
        (state.files.lock().unwrap_or_else(|e| e.into_inner()).config).reloaded(&text, revision);
    }
    Ok(what)
}
