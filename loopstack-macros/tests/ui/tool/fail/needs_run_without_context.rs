use loopstack::tool;

/// Books a room, but takes no context to read the runtime from.
#[tool(needs_run)]
async fn book_room(room: String) -> String {
    room
}

fn main() {}
