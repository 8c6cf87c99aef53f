"""Demo dataset: deterministic (blurred, fused) query pairs mined from the offline corpus.

Every instance names one intended article. ``fused_query`` is a request for it
with a disambiguating qualifier; ``blurred_query`` is the same request with the
qualifier removed. The set is rebuilt on demand from the installed corpus and
cached on disk (never committed); its gold is built once with fixed
components (extractive search + rule extractor), like the paper's static gold.

Where pairs come from (``meta["source"]``):

* ``qualified_title``: titles with a parenthesised qualifier, ``Mercury (planet)``;
  head = the base name, qualifier = the parenthesis.
* ``sibling_description``: an unqualified title whose base name also has a
  qualified sibling (``Casablanca`` vs ``Casablanca (film)``); qualifier = its
  short description ("largest city in Morocco").
* ``dated_title``: a title that is a year, century or era plus a head
  (``1755 Lisbon earthquake``, ``Medieval music``, ``Revolutions of 1848``).
* ``placed_title``: ``<head> of|in <place>`` (``History of China``) where the
  head is an article itself or shared by several such titles.
* ``creator_description``: a work whose description names its creator
  (``1932 novel by Aldous Huxley``); qualifier = the creator.
* ``work_description``: a work whose description starts with a year and a work
  type (``1968 film``); qualifier = that phrase.

Ambiguity kinds (``meta["ambiguity"]``); a parenthesised qualifier is classified
by the first rule that matches:

1. ``creator``: the article's description says "... by <qualifier's first word>"
   (``Leviathan (Hobbes book)``: "1651 book by Thomas Hobbes");
2. ``description``: the qualifier ends in a work or organisation type
   (film, novel, album, band, book, game, magazine ...: ``Psycho (1960 film)``);
3. ``time``: it contains a year, a year range, a century, a world war or an era
   word (ancient, medieval, prehistoric, antiquity);
4. ``region``: it is a place name (a Geography title, or a title described as a
   country, continent, city ...) or a place type (state, city, country ...);
5. ``creator``: it starts with a person's name or surname (People titles, and
   titles whose description carries a life span);
6. ``sense``: anything else (a field or a kind of thing: ``Crane (bird)``).

Other sources have a fixed kind (``sibling_description`` is ``region`` when its
description names a place, else ``sense``).

An instance is kept only if BM25 ranks the intended article first for its
fused query, so gold built from the top evidence is about the intended
article. Selection is deterministic: per kind, candidates are ordered by source
(parenthesised titles first), spread over distinct heads, genuinely ambiguous
ones first (the blurred query does not rank the intended article first), then
by a seeded hash; kinds are then taken round-robin, one article at most once.
"""

from cts.demo.loading import load_demo

__all__ = ["load_demo"]
