"""Stage: evaluate, sessions. A conversation judged across its turns (issue 27).

    stored turns (store.session_turns) -> evaluate_session(turns) -> session record
    job: idle sessions (store.sessions table) -> claim -> evaluate once -> stored record
    reader: GET /v1/sessions (the stored record when complete, computed on read when open)

A session is the turns stored with one ``session_id`` (``conventions.conversations``); its
state is the store's ``sessions`` row, so turns evaluated by different workers or Kafka
consumers make one session, completed once (``job``).
"""
