// The dashboard's sign-in page: a token in the URL's fragment
// (#token=SECRET, which no server sees) fills the form and leaves the
// address bar; the form is sent at once only when the browser says the
// user opened the address (not another site), else on a click.
"use strict";

(function () {
  const params = new URLSearchParams(location.hash.slice(1));
  const tok = params.get("token");
  if (!tok) return;
  history.replaceState(null, "", location.pathname + location.search);
  document.getElementById("login-token").value = tok;
  if (document.body.dataset.auto === "1" && !document.getElementById("login-error")) {
    document.getElementById("login").submit();
  } else {
    document.getElementById("login-notice").hidden = false;
  }
})();
