"""The Textual terminal app: the App class (screens as modes, live refresh, the shared
`app.tcss`) and the access layer its screens are handed. Only the interactive path imports it.
"""
