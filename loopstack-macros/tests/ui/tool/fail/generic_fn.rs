use loopstack::tool;

/// Echoes a value.
#[tool]
async fn echo<T: serde::de::DeserializeOwned>(value: T) -> String {
    let _ = value;
    String::new()
}

fn main() {}
