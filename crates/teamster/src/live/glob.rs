//! Interface-name globs, as port rules write them (`vnet*`): `*` any run of characters, `?`
//! one. Hand-written (a dozen lines) because the glob crates match paths (`/` is special,
//! `[...]` classes) and a rule needs neither. Apart from the rules' module so that the
//! configuration's checks and the rules' matching both use it without importing each other.

/// Whether glob `pattern` (`*`: any run of characters, `?`: one) matches all of `name`.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer walk with one backtrack point (the last `*`): linear in
    // practice, and bounded by |p| * |n| (interface names are at most 15 bytes).
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        for (p, n, want) in [
            ("vnet*", "vnet0", true),
            ("vnet*", "vnet", true),
            ("vnet*", "xvnet0", false),
            ("vnet?", "vnet12", false),
            ("vnet??", "vnet12", true),
            ("*tap*", "mytap3", true),
            ("tmr-*-v", "tmr-1-v", true),
            ("tmr-*-v", "tmr-1-v2", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("eth0", "eth0", true),
            ("eth0", "eth01", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} vs {n}");
        }
    }
}
