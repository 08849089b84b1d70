/* recipekit site: progressive enhancement only. Without this file every page is complete;
   it adds the copy buttons, the index filters and absolute API addresses. */
(function () {
  "use strict";

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "absolute";
      area.style.left = "-9999px";
      document.body.appendChild(area);
      area.select();
      try { document.execCommand("copy") ? resolve() : reject(new Error("copy refused")); }
      catch (e) { reject(e); }
      finally { document.body.removeChild(area); }
    });
  }

  function setupCopy() {
    var buttons = document.querySelectorAll("button.copy[data-copy-target]");
    Array.prototype.forEach.call(buttons, function (button) {
      var target = document.getElementById(button.getAttribute("data-copy-target"));
      if (!target) { return; }
      button.hidden = false;
      button.addEventListener("click", function () {
        var label = button.getAttribute("data-label") || button.textContent;
        button.setAttribute("data-label", label);
        copyText(target.textContent).then(function () {
          button.textContent = "Copied";
          button.setAttribute("data-state", "done");
        }, function () {
          button.textContent = "Select and copy";
          button.setAttribute("data-state", "failed");
        });
        window.setTimeout(function () {
          button.textContent = label;
          button.removeAttribute("data-state");
        }, 2000);
      });
    });
  }

  function setupAbsoluteUrls() {
    var spans = document.querySelectorAll("[data-abs-href]");
    Array.prototype.forEach.call(spans, function (span) {
      span.textContent = new URL(span.getAttribute("data-abs-href"), document.baseURI).href;
    });
  }

  function setupFilters() {
    var form = document.querySelector("form.filters");
    var list = document.querySelector("ol.recipes");
    if (!form || !list) { return; }
    form.hidden = false;
    var selects = form.querySelectorAll("select[name]");
    var items = list.querySelectorAll("li[data-id]");
    var count = document.getElementById("recipe-count");
    var params = new URLSearchParams(window.location.search);
    Array.prototype.forEach.call(selects, function (select) {
      var wanted = params.get(select.name);
      if (wanted !== null) { select.value = wanted; }
    });

    function apply() {
      var shown = 0;
      Array.prototype.forEach.call(items, function (item) {
        var ok = true;
        Array.prototype.forEach.call(selects, function (select) {
          if (select.value && item.getAttribute("data-" + select.name) !== select.value) { ok = false; }
        });
        item.hidden = !ok;
        if (ok) { shown += 1; }
      });
      if (count) { count.textContent = shown + " of " + items.length + " recipes shown"; }
    }

    Array.prototype.forEach.call(selects, function (select) {
      select.addEventListener("change", apply);
    });
    form.addEventListener("submit", function (event) { event.preventDefault(); apply(); });
    apply();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupCopy();
    setupAbsoluteUrls();
    setupFilters();
  });
})();
