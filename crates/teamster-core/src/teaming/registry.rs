//! The registry: every teaming policy the team knows, by name, in the order configuration help
//! and the API list them. Adding a policy is its own file and one line here.

use super::Policy;

/// Every policy. Names must be unique (a test checks).
pub(super) const POLICIES: &[Policy] = &[
    Policy::PORT_ID,
    Policy::SOURCE_MAC,
    Policy::IP_HASH,
    Policy::IP_HASH_L4,
    Policy::LOAD_BASED,
    Policy::HYPERV_PORT,
    Policy::ADDRESS_HASH,
    Policy::DYNAMIC,
    Policy::LBT_DYNAMIC,
];

/// Every policy's name, in the order of [`POLICIES`].
pub(super) const NAMES: [&str; POLICIES.len()] = {
    let mut names = [""; POLICIES.len()];
    let mut i = 0;
    while i < POLICIES.len() {
        names[i] = POLICIES[i].name();
        i += 1;
    }
    names
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_kebab_case_and_round_trip() {
        for (i, p) in POLICIES.iter().enumerate() {
            let name = p.name();
            assert!(!NAMES[..i].contains(&name), "`{name}` is registered twice");
            assert!(
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "`{name}` is not kebab-case"
            );
            assert_eq!(name.parse::<Policy>().unwrap(), *p);
            assert_eq!(p.to_string(), name);
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<Policy>(&format!("\"{name}\"")).unwrap(), *p);
        }
        assert_eq!(
            Policy::names(),
            [
                "port-id",
                "source-mac",
                "ip-hash",
                "ip-hash-l4",
                "load-based",
                "hyperv-port",
                "address-hash",
                "dynamic",
                "lbt-dynamic"
            ]
        );
    }

    #[test]
    fn unknown_names_are_refused_with_the_list() {
        let e = "round-robin".parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains("`round-robin`") && e.contains("port-id, source-mac"), "{e}");
        let e = serde_json::from_str::<Policy>("\"Port-ID\"").unwrap_err().to_string();
        assert!(
            e.contains("unknown variant `Port-ID`") && e.contains("`load-based`"),
            "{e}"
        );
        assert!(serde_json::from_str::<Policy>("3").is_err());
    }
}
