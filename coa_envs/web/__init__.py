"""Web plumbing shared by the web tools: the SSRF guard (``ssrf``), guarded httpx fetching
(``fetch``), content extraction (``extract``), headless browsers behind a guarded proxy
(``browsers``, ``proxy``), an OpenAI-compatible chat client (``llm``), local page
collections for offline search (``collection``) and a loopback test site (``testing``).

Nothing here is imported by ``import coa_envs``; browsers and extractors load lazily.
"""
