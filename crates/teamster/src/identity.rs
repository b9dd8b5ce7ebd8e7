//! A host's name as a certificate proves it (see [`crate::http::tls`]): one lowercase DNS
//! label under [`HOST_DOMAIN`]. Both the switch's `[controller]` section and the controller's
//! TLS listener check names by these rules, so this module depends on nothing.

/// The domain under which a host certificate names its host.
pub const HOST_DOMAIN: &str = "host.teamster";
/// A name no host may have (a label with `--` at its third and fourth characters, which DNS
/// reserves): a certificate valid for it is a wildcard, and proves no host.
pub const NO_HOST: &str = "zz--wildcard-probe";

/// Checks that `name` can be a host's name over TLS: one DNS label of lowercase letters, digits
/// and inner hyphens, at most 63 long, not of DNS's reserved `xx--` form. Its DNS name under
/// [`HOST_DOMAIN`].
pub fn host_label(name: &str) -> Result<String, String> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.get(2..4) != Some("--");
    if !ok {
        return Err(format!(
            "host `{}`: a host that proves its name with a certificate needs a name of 1 to 63 lowercase letters, digits and inner hyphens (one DNS label, not of the reserved `xx--` form)",
            name.escape_debug()
        ));
    }
    Ok(format!("{name}.{HOST_DOMAIN}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_labels_are_lowercase_dns_labels() {
        assert_eq!(host_label("host1").unwrap(), "host1.host.teamster");
        assert_eq!(host_label("a-b-9").unwrap(), "a-b-9.host.teamster");
        for bad in [
            "",
            "Host1",
            "h_1",
            "h.1",
            "-h",
            "h-",
            "xn--h",
            "zz--wildcard-probe",
            &"h".repeat(64),
            "hôte",
        ] {
            assert!(host_label(bad).is_err(), "{bad}");
        }
        assert!(host_label(NO_HOST).is_err(), "the probe must be no host's name");
    }
}
