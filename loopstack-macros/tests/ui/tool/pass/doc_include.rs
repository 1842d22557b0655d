use loopstack::{Tool, tool};

#[doc = include_str!("description.txt")]
#[tool]
async fn described(text: String) -> String {
    text
}

fn main() {
    assert_eq!(Described.description(), "Echoes the text back.\n");
}
