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
//! Each `<interface type='ethernet'>` with a `<target dev=...>` becomes a port on its tap, with
//! the interface's MAC and the group and NetIOC controls of the `<teamster:port>` with that MAC
//! (else the `<teamster:switch>`'s group and no controls); an interface with neither is not
//! Teamster's and is left alone. The ports are the domain's (origin `libvirt`, owner the
//! domain): the switch names them (`DOMAIN-N`, or `vm-HASH-N` when that name is not usable or
//! is another port's) and the hook never touches a port it did not make for this domain (see
//! `crate::live::domain_ports`).
//!
//! What each operation does:
//! - `started begin` (QEMU is running, its taps exist), `reconnect begin` (libvirtd restarted
//!   with the VM running) and `attach begin`: the domain's ports become exactly those of its
//!   interfaces, in one request (`PUT /api/v1/domains/{domain}/ports`) checked and saved once
//!   however many there are: a port already there for the same MAC is kept (updated in place if
//!   its tap or controls changed), one for an interface no longer there goes. On the destination
//!   of a live migration `started` comes as the VM arrives, so its port is added there, and the
//!   switch announces its MAC with a RARP on the port's uplink.
//! - `stopped end` and `release end` (also at the source after a migration): every port of the
//!   domain goes (`DELETE /api/v1/domains/{domain}/ports`), whatever the XML lists now (a NIC
//!   hot-plugged or unplugged with `virsh attach-device --live` ran no hook).
//! - `migrate begin` (the destination, before the VM comes): nothing, and nothing printed, so
//!   libvirt keeps the XML as it is.
//!
//! The XML comes from the domain's definition, parts of which a tenant may write: it is read
//! whole only up to [`MAX_XML`] bytes, [`MAX_NODES`] nodes and [`MAX_DEPTH`] levels of nesting
//! (libvirt's own parser, libxml2, refuses deeper documents by default), and the parser does not
//! recurse per level, so no document can exhaust the hook's stack.
//!
//! Anything else is ignored. Exit status 0 when done (or nothing to do), 1 when the switch
//! refused or could not be reached (the message names the port and the switch; libvirt logs
//! it), 2 on bad input (XML, arguments); but always 0 at `reconnect` and `attach`, where libvirt
//! kills a running VM whose hook fails. A domain without Teamster metadata whose ports cannot be
//! removed at `stopped` because the switch is down is not an error: it had none.

use crate::http::client::{request, segment, Target};
use serde_json::{json, Value};
use std::io::Read;
use std::process::ExitCode;

/// The namespace of Teamster's domain metadata.
pub const NAMESPACE: &str = "https://teamster.dev/libvirt/1";
/// The most domain XML read from standard input.
const MAX_XML: u64 = 4 << 20;
/// The deepest nesting of elements accepted: libxml2's default limit, which libvirt's parser
/// keeps, so no domain libvirt accepted is refused.
pub const MAX_DEPTH: usize = 256;
/// The most nodes (elements, text, comments) accepted: a domain with as many interfaces as a
/// switch has ports, and room for the rest.
pub const MAX_NODES: u32 = 1 << 20;

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

/// What a hook call asks of the switch.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The domain's ports become these (the API's bodies, without names: the switch names them).
    Attach(Vec<Value>),
    /// Every port of the domain goes; `listed` says whether its XML carries Teamster's metadata
    /// (or could not be read), so that a switch that is down is an error.
    Detach {
        listed: bool,
    },
    Nothing,
}

/// Reads the domain XML and decides what `operation`/`sub_operation` asks.
pub fn plan(operation: &str, sub_operation: &str, xml: &str) -> Result<Action, String> {
    let attach = matches!(
        (operation, sub_operation),
        ("started" | "reconnect" | "attach", "begin")
    );
    let detach = matches!((operation, sub_operation), ("stopped" | "release", "end"));
    if detach {
        // The domain's ports go whatever the XML says (or whether it can be read at all).
        let listed = ports_of(xml).map_or(true, |p| p.is_some());
        return Ok(Action::Detach { listed });
    }
    if !attach {
        return Ok(Action::Nothing);
    }
    // A domain that is not on Teamster costs the switch nothing (and needs it not be running).
    Ok(ports_of(xml)?.map_or(Action::Nothing, Action::Attach))
}

/// Parses the domain XML within the bounds of the module documentation.
fn parse(xml: &str) -> Result<roxmltree::Document<'_>, String> {
    let options = roxmltree::ParsingOptions {
        nodes_limit: MAX_NODES,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, options).map_err(|e| format!("the domain XML: {e}"))?;
    // Each node's depth from its parent's (nodes come in document order, parents first).
    let mut depth = vec![0usize; doc.descendants().count()];
    for n in doc.descendants().filter(|n| n.is_element()) {
        let d = n.parent().map_or(0, |p| depth[p.id().get_usize()]) + 1;
        if d > MAX_DEPTH {
            return Err(format!(
                "the domain XML nests elements more than {MAX_DEPTH} deep (at line {}); refused",
                doc.text_pos_at(n.range().start).row
            ));
        }
        depth[n.id().get_usize()] = d;
    }
    Ok(doc)
}

/// The ports of the domain's Teamster interfaces (None: the XML has no Teamster metadata).
fn ports_of(xml: &str) -> Result<Option<Vec<Value>>, String> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let Some(switch) = root.descendants().find(|n| n.has_tag_name((NAMESPACE, "switch"))) else {
        return Ok(None);
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
    for iface in interfaces {
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
        let mut body = json!({"interface": dev, "group": group, "mac": mac.to_ascii_lowercase()});
        for key in ["pool", "class", "reservation", "shares", "limit", "backend"] {
            if let Some(v) = entry.and_then(|e| e.attribute(key)) {
                body[key] = json!(v);
            }
        }
        out.push(body);
    }
    Ok(Some(out))
}

/// An API error's message.
fn message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).to_string())
}

/// The path of domain `domain`'s ports.
fn domain_path(domain: &str) -> String {
    format!("/api/v1/domains/{}/ports", segment(domain))
}

/// Sets the domain's ports to `ports` in one request.
async fn attach(target: &Target, domain: &str, ports: &[Value]) -> Result<(), String> {
    let a = request(target, "PUT", &domain_path(domain), Some(json!({ "ports": ports }))).await?;
    match a.status {
        200 => Ok(()),
        s => Err(format!("the domain's ports: refused ({s}): {}", message(&a.body))),
    }
}

/// Removes every port of the domain; none is fine.
async fn detach(target: &Target, domain: &str) -> Result<(), String> {
    let a = request(target, "DELETE", &domain_path(domain), None).await?;
    match a.status {
        204 => Ok(()),
        s => Err(format!("the domain's ports: not removed ({s}): {}", message(&a.body))),
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
        .and_then(|_| plan(&args.operation, &args.sub_operation, &xml))
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
            Action::Attach(ports) => attach(&args.target, &args.domain, ports).await,
            Action::Detach { .. } => detach(&args.target, &args.domain).await,
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
        Err(_) if action == (Action::Detach { listed: false }) => ExitCode::SUCCESS,
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
        let Action::Attach(ports) = plan("started", "begin", XML).unwrap() else {
            panic!("attach expected");
        };
        assert_eq!(ports.len(), 2, "the bridge interface is not Teamster's");
        assert_eq!(
            ports[0],
            json!({"interface": "vnet7", "group": "vms", "mac": "52:54:00:aa:00:01",
                   "reservation": "100M", "shares": "high", "limit": "1G"})
        );
        assert_eq!(ports[1]["group"], "storage");
        assert_eq!(ports[1]["interface"], "vnet9");
        assert_eq!(plan("stopped", "end", XML).unwrap(), Action::Detach { listed: true });
        assert_eq!(
            plan("release", "end", XML).unwrap(),
            plan("stopped", "end", XML).unwrap()
        );
        for (op, sub) in [
            ("migrate", "begin"),
            ("prepare", "begin"),
            ("start", "begin"),
            ("stopped", "begin"),
        ] {
            assert_eq!(plan(op, sub, XML).unwrap(), Action::Nothing, "{op} {sub}");
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
    fn a_domain_without_teamster_metadata_or_with_bad_xml() {
        // The same element names in another namespace are not Teamster's.
        let plain = XML.replace("https://teamster.dev/libvirt/1", "urn:x");
        assert_eq!(plan("started", "begin", &plain).unwrap(), Action::Nothing);
        assert_eq!(
            plan("stopped", "end", &plain).unwrap(),
            Action::Detach { listed: false }
        );
        assert!(plan("started", "begin", "<domain><devices>").is_err());
        // Unreadable at stop: the ports go all the same.
        assert_eq!(
            plan("stopped", "end", "<domain>").unwrap(),
            Action::Detach { listed: true }
        );
        // Nothing asked: the XML is not even read.
        assert_eq!(plan("migrate", "begin", "not xml").unwrap(), Action::Nothing);
    }

    /// Nesting is bounded, with an error, at any depth: the parser does not recurse per level.
    #[test]
    fn deep_nesting_is_refused_without_exhausting_the_stack() {
        let nest = |n: usize| {
            format!(
                "<domain><metadata>{}{}</metadata></domain>",
                "<a>".repeat(n),
                "</a>".repeat(n)
            )
        };
        assert_eq!(plan("started", "begin", &nest(MAX_DEPTH - 2)).unwrap(), Action::Nothing);
        for n in [MAX_DEPTH - 1, 14_000, 200_000] {
            let e = plan("started", "begin", &nest(n)).unwrap_err();
            assert!(e.contains(&format!("more than {MAX_DEPTH} deep")), "{n}: {e}");
        }
        let e = plan("started", "begin", &"<a/>".repeat(10)).unwrap_err();
        assert!(e.contains("domain XML"), "{e}");
    }
}
