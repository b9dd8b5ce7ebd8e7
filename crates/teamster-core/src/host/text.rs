//! Host files are TOML: [`parse_toml`] reads one into its serde shape.

/// Parses TOML text into `T`; a shape error leads with the key path (`ports[0].tx`) and keeps
/// the TOML parser's line, column and caret.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| e.to_string().trim_end().to_string())?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            inner.trim_end().to_string()
        } else {
            format!("{path}: {}", inner.trim_end())
        }
    })
}
