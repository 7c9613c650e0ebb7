"""The chat prompts of ``bench_peers.py`` (also timed by ``bench_eagle.py``): a summary, a
copy and a free-writing prompt for SmolLM2."""

PARAGRAPH = (
    "The lighthouse at the end of the harbour was built in 1854 by a company of local masons "
    "who had never raised anything taller than a church. For ninety years its lamp burned "
    "whale oil, then kerosene, and finally electricity, and three generations of one family "
    "kept it lit through storms that sank larger ships than any that sailed from the town. "
    "When the last keeper retired in 1962 the light was automated, the cottage was sold, and "
    "the tower became a small museum where visitors climb one hundred and twelve steps to see "
    "the lens that once guided fishing boats home."
)
CHATS = {
    "summarize": f"Summarize the following paragraph in two sentences.\n\n{PARAGRAPH}",
    "copy": f"Repeat the following paragraph exactly, word for word.\n\n{PARAGRAPH}",
    "poem": "Write a poem about the sea.",
}
