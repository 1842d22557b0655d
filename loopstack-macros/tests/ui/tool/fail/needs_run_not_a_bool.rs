use loopstack::tool;

/// Books a room.
#[tool(needs_run = 1)]
async fn book_room(room: String, cx: &loopstack::ToolContext) -> String {
    let _ = cx;
    room
}

fn main() {}
