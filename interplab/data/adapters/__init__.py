"""Dataset adapters: one module per real source, each turning the source's schema into a method's input with the
paper's prompt template(s), label convention and answer parser (docs/data.md lists them).

    halueval          HaluEval-QA -> Truth-Score (text, label) items and the TruthProbe evaluation prompts
    decodeshare_pool  GSM8K, CSQA, StrategyQA, AQuA, ARC-C, OBQA, QASC, BoolQ, PIQA, LogiQA with 3 templates each
    crh_concepts      the CRH paper's 100 concepts (package data), pair texts, AlpacaEval questions
    chat_messages     chat corpora (tulu, WildChat, lmsys, Infinity-Instruct, orca) -> `messages` dialogues
    text_corpus       plain-text corpora (WikiText, the Pile) for hyperfitting and BT(P)

Every adapter streams (`interplab.data.files.open_source`), takes a hub name or a local file, and respects
limit / split / seed; offline the hub route raises `HubUnavailableError` naming the local-file route.
"""
