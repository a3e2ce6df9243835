// Inlined first into the PyTorch Profiler tab's page by stepscope (tensorboard/profiler_tab.py).
// Whatever stops a view from drawing is said in words at the top of the page, instead of a spinner that
// never ends: an uncaught script error, a rejected promise, a failed request to the plugin's API, and the
// charts stand-in (offline/gcharts.js) not loading at all. Charts that cannot draw say so in their own box
// (gcharts.js) and here.
(function () {
  'use strict';
  var messages = [];

  function banner() {
    var box = document.getElementById('stepscope-page-error');
    if (!box) {
      if (!document.body) return null;
      box = document.createElement('div');
      box.id = 'stepscope-page-error';
      box.setAttribute('role', 'alert');
      box.style.cssText = 'position:fixed;top:0;left:0;right:0;z-index:100000;background:#fdecea;color:#611a15;' +
        'border-bottom:2px solid #d32f2f;font:14px Arial,sans-serif;padding:8px 12px;white-space:pre-wrap;' +
        'max-height:40vh;overflow:auto';
      document.body.appendChild(box);
    }
    return box;
  }

  function render() {
    var box = banner();
    if (!box) return;
    box.textContent = 'This view cannot draw:\n' + messages.map(function (m) { return '\u2022 ' + m; }).join('\n');
  }

  // report(text): add one line to the banner (the same line once)
  window.__stepscopeReport = function (text) {
    text = String(text).slice(0, 500);
    if (messages.indexOf(text) >= 0) return;
    messages.push(text);
    if (document.body) render();
    else document.addEventListener('DOMContentLoaded', render);
  };

  window.addEventListener('error', function (e) {
    if (e.target && e.target !== window && (e.target.src || e.target.href)) {
      window.__stepscopeReport('could not load ' + (e.target.src || e.target.href));
      return;
    }
    window.__stepscopeReport('script error: ' + (e.message || e.error) +
      (e.filename ? ' (' + e.filename.split('/').pop() + ':' + e.lineno + ')' : ''));
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    var r = e.reason;
    if (r && typeof r.status === 'number' && typeof r.url === 'string') return;  // a failed request: said below
    window.__stepscopeReport('script error: ' + ((r && (r.stack || r.message)) || r));
  });

  // The bundle reaches the plugin's API through fetch; an answer that is not 2xx leaves its view spinning.
  if (window.fetch) {
    var fetch0 = window.fetch.bind(window);
    window.fetch = function (input, init) {
      var url = typeof input === 'string' ? input : (input && input.url) || String(input);
      return fetch0(input, init).then(function (response) {
        if (!response.ok) {
          response.clone().text().then(function (body) {
            window.__stepscopeReport('the plugin answered ' + response.status + ' for ' + url.split('?')[0] +
              (body ? ': ' + body.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300) : ''));
          });
        }
        return response;
      }, function (err) {
        window.__stepscopeReport('request failed: ' + url.split('?')[0] + ' (' + err + ')');
        throw err;
      });
    };
  }

  window.addEventListener('load', function () {
    if (!window.google || !window.google.visualization) {
      window.__stepscopeReport('the offline charts (offline/gcharts.js) did not load, so no chart can draw');
    }
  });
})();
