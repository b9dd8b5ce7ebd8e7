//! `teamster libvirt-hook`: what libvirt's qemu hook (`/etc/libvirt/hooks/qemu`, shipped as a
//! two-line wrapper that execs this) does for VMs on a Teamster switch.
//!
//! libvirt runs the hook as `qemu DOMAIN OPERATION SUB-OPERATION EXTRA` with the domain's XML
//! on standard input. A VM is on Teamster if its XML carries Teamster's metadata:
//!
//! ```xml
//! <metadata>
//!   <teamster:switch xmlns:teamster="https://teamster.dev/libvirt/1" group="vms">
//!     <teamster:port mac="52:54:00:12:34:56" group="vms" reservation="100M" shares="high" limit="1G"/>
//!   </teamster:switch>
//! </metadata>
//! ```
//!
//! Each `<interface type='ethernet'>` with a `<target dev=...>` becomes port `DOMAIN-N` (N
//! counting those interfaces from 0) on its tap, with the interface's MAC and the group and
//! NetIOC controls of the `<teamster:port>` with that MAC (else the `<teamster:switch>`'s
//! group and no controls); an interface with neither is not Teamster's and is left alone.
//!
//! What each operation does:
//! - `started begin` (QEMU is running, its taps exist), `reconnect begin` (libvirtd restarted
//!   with the VM running) and `attach begin`: add the ports; a port already there with the
//!   same interface and MAC is kept, one with another is replaced. On the destination of a
//!   live migration `started` comes as the VM arrives, so its port is added there, and the
//!   switch announces its MAC with a RARP on the port's uplink.
//! - `stopped end` and `release end` (also at the source after a migration): remove them.
//! - `migrate begin` (the destination, before the VM comes): nothing, and nothing printed, so
//!   libvirt keeps the XML as it is.
//!
//! Anything else is ignored. Exit status 0 when done (or nothing to do), 1 when the switch
//! refused or could not be reached (the message names the port and the switch; libvirt logs
//! it), 2 on bad input (XML, arguments); but always 0 at `reconnect` and `attach`, where libvirt
//! kills a running VM whose hook fails.

use crate::ctl::{request, segment, Target};
use serde_json::{json, Value};
use std::io::Read;
use std::process::ExitCode;

/// The namespace of Teamster's domain metadata.
pub const NAMESPACE: &str = "https://teamster.dev/libvirt/1";
/// The most domain XML read from standard input.
const MAX_XML: u64 = 4 << 20;

#[derive(clap::Args)]
pub struct HookArgs {
    /// The domain's name.
    pub domain: String,
    /// prepare, start, started, stopped, release, migrate, restore, reconnect or attach.
    pub operation: String,
    /// begin or end (or -).
    pub sub_operation: String,
    /// libvirt's extra argument (unused).
    pub extra: Option<String>,
    #[command(flatten)]
    pub target: Target,
}

/// A port the hook adds for one of the domain's interfaces.
#[derive(Debug, Clone, PartialEq)]
pub struct HookPort {
    pub name: String,
    /// The API's body for `POST /api/v1/ports`.
    pub body: Value,
}

/// What a hook call asks of the switch.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Attach(Vec<HookPort>),
    Detach(Vec<String>),
    Nothing,
}

/// Reads the domain XML and decides what `operation`/`sub_operation` asks.
pub fn plan(domain: &str, operation: &str, sub_operation: &str, xml: &str) -> Result<Action, String> {
    let attach = matches!(
        (operation, sub_operation),
        ("started" | "reconnect" | "attach", "begin")
    );
    let detach = matches!((operation, sub_operation), ("stopped" | "release", "end"));
    if !attach && !detach {
        return Ok(Action::Nothing);
    }
    let ports = ports_of(domain, xml)?;
    Ok(if attach {
        Action::Attach(ports)
    } else {
        Action::Detach(ports.into_iter().map(|p| p.name).collect())
    })
}

/// The ports of the domain's Teamster interfaces.
fn ports_of(domain: &str, xml: &str) -> Result<Vec<HookPort>, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("the domain XML: {e}"))?;
    let root = doc.root_element();
    let Some(switch) = root.descendants().find(|n| n.has_tag_name((NAMESPACE, "switch"))) else {
        return Ok(Vec::new());
    };
    let default_group = switch.attribute("group");
    let entries: Vec<roxmltree::Node> = switch
        .children()
        .filter(|n| n.has_tag_name((NAMESPACE, "port")))
        .collect();
    let interfaces = root
        .children()
        .filter(|n| n.has_tag_name("devices"))
        .flat_map(|d| d.children())
        .filter(|n| n.has_tag_name("interface") && n.attribute("type") == Some("ethernet"));
    let mut out = Vec::new();
    for (n, iface) in interfaces.enumerate() {
        let child = |tag: &str, attr: &str| {
            iface
                .children()
                .find(|c| c.has_tag_name(tag))
                .and_then(|c| c.attribute(attr))
        };
        let (Some(dev), Some(mac)) = (child("target", "dev"), child("mac", "address")) else {
            continue;
        };
        let entry = entries
            .iter()
            .find(|e| e.attribute("mac").is_some_and(|m| m.eq_ignore_ascii_case(mac)));
        let Some(group) = entry.and_then(|e| e.attribute("group")).or(default_group) else {
            continue;
        };
        let name = port_name(domain, n);
        let mut body = json!({"name": name, "interface": dev, "group": group, "mac": mac.to_ascii_lowercase()});
        for key in ["pool", "class", "reservation", "shares", "limit", "backend"] {
            if let Some(v) = entry.and_then(|e| e.attribute(key)) {
                body[key] = json!(v);
            }
        }
        out.push(HookPort { name, body });
    }
    Ok(out)
}

/// The port name of a domain's `n`th Teamster interface: `DOMAIN-N`, or, for a domain name a
/// port name cannot hold (over 64 bytes with the suffix, or with `/`, `\\` or control
/// characters), `vm-HASH-N` with a stable 64-bit FNV-1a hash of the domain name.
pub fn port_name(domain: &str, n: usize) -> String {
    let plain = format!("{domain}-{n}");
    let usable = plain.len() <= 64 && !plain.chars().any(|c| c.is_control() || c == '/' || c == '\\');
    if usable {
        return plain;
    }
    let hash = domain.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("vm-{hash:016x}-{n}")
}

/// An API error's message.
fn message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).to_string())
}

/// Adds `p`, keeping a port of that name already there on the same interface with the same MAC
/// (libvirtd reconnecting) and replacing one that differs (the VM restarted on another tap).
async fn attach(target: &Target, p: &HookPort) -> Result<(), String> {
    let path = format!("/api/v1/ports/{}", segment(&p.name));
    let have = request(target, "GET", &path, None).await?;
    if have.status == 200 {
        let v: Value = serde_json::from_slice(&have.body).map_err(|e| e.to_string())?;
        if v["interface"] == p.body["interface"] && v["mac"] == p.body["mac"] && v["group"] == p.body["group"] {
            return Ok(());
        }
        detach(target, &p.name).await?;
    }
    let a = request(target, "POST", "/api/v1/ports", Some(p.body.clone())).await?;
    match a.status {
        201 => Ok(()),
        s => Err(format!("port {}: refused ({s}): {}", p.name, message(&a.body))),
    }
}

/// Removes port `name`; one already gone is fine.
async fn detach(target: &Target, name: &str) -> Result<(), String> {
    let a = request(target, "DELETE", &format!("/api/v1/ports/{}", segment(name)), None).await?;
    match a.status {
        204 | 404 => Ok(()),
        s => Err(format!("port {name}: not removed ({s}): {}", message(&a.body))),
    }
}

/// The exit status for a hook call that failed with `status` (1: the switch refused or was
/// unreachable, 2: bad input). At `reconnect` (libvirtd restarting) and `attach`, libvirt kills
/// the already running QEMU process when the hook fails (libvirt's hooks documentation): a
/// switch that is down or refuses a port must not take running VMs down with it, so those
/// operations report the error (libvirt logs standard error) and succeed.
fn exit_status(operation: &str, status: u8) -> ExitCode {
    if status != 0 && matches!(operation, "reconnect" | "attach") {
        eprintln!("teamster libvirt-hook: {operation}: the VM keeps running without its Teamster ports");
        return ExitCode::SUCCESS;
    }
    ExitCode::from(status)
}

/// Runs the hook.
pub fn run(args: HookArgs) -> ExitCode {
    let mut xml = String::new();
    let read = std::io::stdin().take(MAX_XML).read_to_string(&mut xml);
    let action = match read
        .map_err(|e| format!("reading the domain XML from standard input: {e}"))
        .and_then(|_| plan(&args.domain, &args.operation, &args.sub_operation, &xml))
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("teamster libvirt-hook: {}: {e}", args.domain);
            return exit_status(&args.operation, 2);
        }
    };
    let work = async {
        match &action {
            Action::Nothing => Ok::<(), String>(()),
            Action::Attach(ports) => {
                for p in ports {
                    attach(&args.target, p).await?;
                }
                Ok(())
            }
            Action::Detach(names) => {
                for n in names {
                    detach(&args.target, n).await?;
                }
                Ok(())
            }
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("teamster libvirt-hook: {e}");
            return exit_status(&args.operation, 1);
        }
    };
    match rt.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("teamster libvirt-hook: {}: {e}", args.domain);
            exit_status(&args.operation, 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<domain type='kvm'>
  <name>web1</name>
  <metadata>
    <teamster:switch xmlns:teamster="https://teamster.dev/libvirt/1" group="vms">
      <teamster:port mac="52:54:00:AA:00:01" reservation="100M" shares="high" limit="1G"/>
      <teamster:port mac="52:54:00:aa:00:02" group="storage"/>
    </teamster:switch>
  </metadata>
  <devices>
    <interface type='ethernet'>
      <mac address='52:54:00:aa:00:01'/>
      <target dev='vnet7' managed='no'/>
      <model type='virtio'/>
    </interface>
    <interface type='bridge'>
      <mac address='52:54:00:aa:00:09'/>
      <source bridge='br0'/>
      <target dev='vnet8'/>
    </interface>
    <interface type='ethernet'>
      <mac address='52:54:00:aa:00:02'/>
      <target dev='vnet9'/>
    </interface>
  </devices>
</domain>"#;

    #[test]
    fn started_adds_a_port_per_ethernet_interface_with_its_metadata() {
        let Action::Attach(ports) = plan("web1", "started", "begin", XML).unwrap() else {
            panic!("attach expected");
        };
        assert_eq!(ports.len(), 2, "the bridge interface is not Teamster's");
        assert_eq!(ports[0].name, "web1-0");
        assert_eq!(
            ports[0].body,
            json!({"name": "web1-0", "interface": "vnet7", "group": "vms", "mac": "52:54:00:aa:00:01",
                   "reservation": "100M", "shares": "high", "limit": "1G"})
        );
        assert_eq!(ports[1].name, "web1-1");
        assert_eq!(ports[1].body["group"], "storage");
        assert_eq!(ports[1].body["interface"], "vnet9");
        assert_eq!(
            plan("web1", "stopped", "end", XML).unwrap(),
            Action::Detach(vec!["web1-0".into(), "web1-1".into()])
        );
        assert_eq!(
            plan("web1", "release", "end", XML).unwrap(),
            plan("web1", "stopped", "end", XML).unwrap()
        );
        for (op, sub) in [
            ("migrate", "begin"),
            ("prepare", "begin"),
            ("start", "begin"),
            ("stopped", "begin"),
        ] {
            assert_eq!(plan("web1", op, sub, XML).unwrap(), Action::Nothing, "{op} {sub}");
        }
    }

    #[test]
    fn a_failure_at_reconnect_or_attach_never_has_libvirt_kill_a_running_vm() {
        for op in ["reconnect", "attach"] {
            assert_eq!(exit_status(op, 1), ExitCode::SUCCESS, "{op}");
            assert_eq!(exit_status(op, 2), ExitCode::SUCCESS, "{op}");
        }
        // A VM starting is stopped instead of running without its ports.
        assert_eq!(exit_status("started", 1), ExitCode::from(1));
        assert_eq!(exit_status("stopped", 2), ExitCode::from(2));
        assert_eq!(exit_status("started", 0), ExitCode::SUCCESS);
    }

    #[test]
    fn every_domain_name_gives_a_usable_port_name() {
        assert_eq!(port_name("web1", 0), "web1-0");
        let long = "x".repeat(80);
        let name = port_name(&long, 2);
        assert!(
            name.starts_with("vm-") && name.ends_with("-2") && name.len() <= 64,
            "{name}"
        );
        assert_eq!(name, port_name(&long, 2), "stable, so stop removes what start added");
        assert_ne!(port_name("a\\b", 0), "a\\b-0");
    }

    #[test]
    fn a_domain_without_teamster_metadata_or_with_bad_xml() {
        // The same element names in another namespace are not Teamster's.
        let plain = XML.replace("https://teamster.dev/libvirt/1", "urn:x");
        assert_eq!(
            plan("web1", "started", "begin", &plain).unwrap(),
            Action::Attach(vec![])
        );
        assert!(plan("web1", "started", "begin", "<domain><devices>").is_err());
        // Nothing asked: the XML is not even read.
        assert_eq!(plan("web1", "migrate", "begin", "not xml").unwrap(), Action::Nothing);
    }
}
