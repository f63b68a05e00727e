"""Stage: evaluate, sessions. A conversation judged across its turns (issue 27).

    stored turns (store.session_turns) -> evaluate_session(turns) -> session record

A session is the turns stored with one ``session_id`` (``conventions.conversations``),
computed on read from the store, so turns evaluated by different workers or Kafka
consumers make one session.
"""
