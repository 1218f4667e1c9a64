"""The web console for admins (`web:`, docs/web.md): sign-in, the pages, the server."""
