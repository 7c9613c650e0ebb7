"""The chat prompts of ``bench_peers.py`` (also timed by ``bench_eagle.py``): a summary, a
copy and a free-writing prompt for SmolLM2; and the held-out prompts, MT-bench first turns
before them."""

from specjax.train.prompts import MTBENCH, cached_member, mtbench_questions

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


def held_out(mtbench: int, chats: tuple[str, ...] = tuple(CHATS)) -> tuple[dict[str, str], str]:
    """``(name -> text, note)``: the first ``mtbench`` MT-bench first turns (``mt81 writing``,
    ...; never used in training) then the ``chats`` (``peers poem``, ...), as ``bench_eagle.py``
    names them. MT-bench is read only where it is already in the cache (a machine without a
    network cannot fetch it): else the chats alone, and the note says so."""
    chat = {f"peers {k}": CHATS[k] for k in chats}
    if mtbench <= 0:
        return chat, f"{len(chat)} chat prompts"
    path = cached_member(MTBENCH)
    if not path.is_file():
        note = f"MT-bench questions not in the cache ({path}): the {len(chat)} chat prompts alone"
        return chat, note
    questions = mtbench_questions()[:mtbench]
    mt = {f"mt{q['question_id']} {q['category']}": q["turns"][0] for q in questions}
    note = f"{len(mt) + len(chat)} held-out prompts ({len(mt)} MT-bench first turns, "
    note += f"{len(chat)} chats)"
    return mt | chat, note
