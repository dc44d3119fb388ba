// engramdb web UI: small progressive enhancements. Every page works without this file.
(function () {
  "use strict";

  // "/" focuses the search box (or goes to the search page); Escape leaves a field.
  document.addEventListener("keydown", function (event) {
    var tag = (event.target && event.target.tagName) || "";
    var typing = tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
    if (event.key === "Escape" && typing) {
      event.target.blur();
      return;
    }
    if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "/") {
      var box = document.querySelector("[data-hotkey='/']");
      event.preventDefault();
      if (box) box.focus();
      else window.location.href = "/ui/search";
    }
  });

  function query(form) {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) {
      if (typeof value === "string" && value !== "") params.append(key, value);
    });
    return params.toString();
  }

  function swap(target, url, pageUrl) {
    target.setAttribute("aria-busy", "true");
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.redirected && response.url.indexOf("/ui/signin") !== -1) {
          window.location.href = response.url;
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (html === null) return;
        target.innerHTML = html;
        if (pageUrl) window.history.replaceState(null, "", pageUrl);
        wirePages(target);
      })
      .catch(function () {
        // The network failed: fall back to a full page load.
        if (pageUrl) window.location.href = pageUrl;
      })
      .finally(function () {
        target.removeAttribute("aria-busy");
      });
  }

  // Forms with data-fragment load their results in place; the URL stays shareable.
  function wireForms() {
    document.querySelectorAll("form[data-fragment]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        var target = document.querySelector(form.getAttribute("data-target"));
        if (!target) return;
        event.preventDefault();
        var q = query(form);
        swap(target, form.getAttribute("data-fragment") + "?" + q, form.getAttribute("action") + "?" + q);
      });
    });
  }

  // Paging links inside a fragment load the next page in place.
  function wirePages(root) {
    root.querySelectorAll("a[data-page]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        var target = link.closest("[aria-live]");
        if (!target) return;
        event.preventDefault();
        var href = link.getAttribute("href");
        var q = href.slice(href.indexOf("?") + 1);
        swap(target, "/ui/fragments/memories?" + q, href).then(function () {
          target.setAttribute("tabindex", "-1");
          target.focus();
        });
      });
    });
  }

  // A purge button stays disabled until the confirmation word is typed.
  function wireConfirm() {
    document.querySelectorAll("form[data-confirm-word]").forEach(function (form) {
      var word = form.getAttribute("data-confirm-word");
      var input = form.querySelector("input[name=confirm]");
      var button = form.querySelector("button[type=submit]");
      if (!input || !button) return;
      var check = function () {
        button.disabled = input.value.trim().toLowerCase() !== word;
      };
      input.addEventListener("input", check);
      check();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    wireForms();
    wirePages(document);
    wireConfirm();
  });
})();
